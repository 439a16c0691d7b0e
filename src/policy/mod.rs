//! Every rule that decides whether a client's input is safe to hand to a shell, git, the disk or
//! a provider, the operator's allowlist settings those rules read, and the rules by which a
//! workspace's own output is read as data (`metric_line`).
//! Each function returns the input in canonical form or a [`PolicyError`] naming the rule.

mod allowlist;
mod artifact_link;
mod commit;
mod error;
mod functions;
mod git_ref;
mod id;
mod image;
mod metric_line;
mod mount;
mod names;
mod path;
mod ports;
mod preview_host;
mod repo;
mod resources;
mod signing;
mod tags;
mod tar_entry;
mod template;
mod ticket;

pub use allowlist::{name_allowlist, secret_allowlist, AllowedSecret};
pub use artifact_link::{mint_link, verify_link, LinkClaim, MAX_LINK_TOKEN_CHARS};
pub use commit::{
    author_email, author_name, commit_message, pull_request_body, pull_request_title,
    MAX_AUTHOR_EMAIL_CHARS, MAX_AUTHOR_NAME_CHARS, MAX_COMMIT_MESSAGE_BYTES,
    MAX_PULL_REQUEST_BODY_BYTES, MAX_PULL_REQUEST_TITLE_CHARS,
};
pub use error::{echo, PolicyError, ECHO_CHARS};
pub use functions::{
    allowed_function, function_allowlist, function_call_id, function_call_id_pattern,
    modal_app_name, modal_app_name_pattern, modal_function_name,
};
pub use git_ref::{git_ref, MAX_REF_BYTES};
pub use id::{check_id, id_pattern, new_id, IdKind};
pub use image::{
    apt_package, image_id, image_name, image_packages, pip_package, MAX_IMAGE_PACKAGES,
    MAX_IMAGE_TAG_BYTES, MAX_PACKAGE_NAME_BYTES, MAX_PACKAGE_VERSION_BYTES,
};
pub use metric_line::{
    is_metric_name, metric_line, MetricLine, MetricLineReader, MAX_METRIC_LINE_BYTES,
    MAX_METRIC_NAMES, MAX_METRIC_NAME_CHARS, METRIC_PREFIX,
};
pub use mount::{volume_mount, SYSTEM_TREES, WRITABLE_DIRS};
pub use names::{allowed, env_name, modal_name, MAX_ENV_NAME_BYTES, MAX_MODAL_NAME_CHARS};
pub use path::{workspace_path, MAX_COMPONENT_BYTES, MAX_PATH_BYTES};
pub use ports::{preview_port, preview_ports, MAX_PREVIEW_PORTS, MIN_PREVIEW_PORT};
pub use preview_host::{
    preview_host, preview_host_target, preview_origin_host, HostTarget, MAX_PREVIEW_HOST_CHARS,
    MAX_PREVIEW_LABEL_CHARS,
};
pub use repo::{github_base, github_repo, GitHubRepo, MAX_BASE_URL_CHARS, MAX_REPO_INPUT_CHARS};
pub use resources::{
    allowed_gpu, cpu_cores, cpu_limit, gpu, gpu_allowlist, memory_limit_mib, memory_mib,
    outbound_allowlists, outbound_cidr, outbound_domain, region, regions, Allowlists, GPU_TYPES,
    MAX_CPU_CORES, MAX_DOMAIN_CHARS, MAX_GPU_COUNT, MAX_LIST_ENTRIES, MAX_MEMORY_MIB, MAX_REGIONS,
    MAX_REGION_CHARS, MIN_CPU_CORES, MIN_MEMORY_MIB, REFUSED_RANGES,
};
pub use tags::{
    caller_tags, idempotency_key, is_managed_tag, snapshot_label, stored_tag, tag_key,
    IDEMPOTENCY_TAG, MANAGED_TAGS, MANAGED_TAG_PREFIXES, MAX_IDEMPOTENCY_KEY_CHARS,
    MAX_SNAPSHOT_LABEL_CHARS, MAX_TAGS, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, WORKSPACE_TAGS,
};
pub use tar_entry::{TarEntry, TarKind, TarLimits, TarPlan};
pub use template::{template_name, template_name_pattern, MAX_TEMPLATE_NAME_CHARS};
pub use ticket::{
    mint_ticket, verify_ticket, TicketClaim, MAX_OBJECT_CHARS, MAX_PURPOSE_CHARS, MAX_TICKET_CHARS,
    MAX_TICKET_SECONDS,
};

#[cfg(test)]
mod tests {
    /// How many cases each property test of the policies runs: ~2000 by default,
    /// `PROPTEST_CASES` for longer runs (`make fuzz`).
    pub(super) fn test_cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000)
    }
}

//! Python bindings for the policies: argument conversion and registration, no rules of their own.
//! Every rejection becomes `modal_workspace_core.PolicyError` through `errors::policy_error`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::errors::policy_error;
use crate::agent::ops::under_root;
use crate::patch::{Format, Patch};
use crate::policy::{self, PolicyError};

/// A GitHub repository that passed the policy. Made only by `github_repo`.
#[pyclass(
    name = "GitHubRepo",
    module = "modal_workspace_core._core",
    frozen,
    eq,
    hash
)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyGitHubRepo(policy::GitHubRepo);

#[pymethods]
impl PyGitHubRepo {
    #[getter]
    fn owner(&self) -> &str {
        &self.0.owner
    }

    #[getter]
    fn name(&self) -> &str {
        &self.0.name
    }

    #[getter]
    fn slug(&self) -> String {
        self.0.slug()
    }

    #[getter]
    fn url(&self) -> String {
        self.0.url()
    }

    /// `BASE/OWNER/REPO.git` on a base URL that `github_base` accepts.
    fn url_on(&self, base: &Bound<'_, PyString>) -> PyResult<String> {
        self.0.url_on(text(base)?).map_err(policy_error)
    }

    fn __repr__(&self) -> String {
        // Both parts are policy-checked ASCII without quotes, so no escaping is needed.
        format!(
            "GitHubRepo(owner='{}', name='{}')",
            self.0.owner, self.0.name
        )
    }
}

/// Borrows a Python `str` as UTF-8. A lone surrogate cannot be UTF-8; it is refused as input,
/// not raised as a `UnicodeEncodeError`, so callers only ever see `PolicyError` for bad text.
fn text<'a>(value: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    value.to_str().map_err(|_| {
        policy_error(PolicyError::without_echo(
            "text.not-unicode",
            "input must be valid Unicode text (it contains a lone surrogate)",
        ))
    })
}

/// Parses `OWNER/REPO` or `https://github.com/OWNER/REPO(.git)` into a `GitHubRepo`.
#[pyfunction]
fn github_repo(text: &Bound<'_, PyString>) -> PyResult<PyGitHubRepo> {
    let repo = policy::github_repo(self::text(text)?).map_err(policy_error)?;
    Ok(PyGitHubRepo(repo))
}

/// Checks the operator's GitHub base URL and returns it canonical.
#[pyfunction]
fn github_base(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::github_base(self::text(text)?).map_err(policy_error)
}

/// Checks a branch, tag or commit name and returns it unchanged.
#[pyfunction]
fn git_ref(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::git_ref(self::text(text)?).map_err(policy_error)
}

/// Checks a commit message and returns it unchanged.
#[pyfunction]
fn commit_message(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::commit_message(self::text(text)?).map_err(policy_error)
}

/// Checks a commit author's name and returns it unchanged.
#[pyfunction]
fn author_name(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::author_name(self::text(text)?).map_err(policy_error)
}

/// Checks a commit author's email and returns it unchanged.
#[pyfunction]
fn author_email(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::author_email(self::text(text)?).map_err(policy_error)
}

/// Checks a pull request's title and returns it unchanged.
#[pyfunction]
fn pull_request_title(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::pull_request_title(self::text(text)?).map_err(policy_error)
}

/// Checks a pull request's body and returns it unchanged.
#[pyfunction]
fn pull_request_body(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::pull_request_body(self::text(text)?).map_err(policy_error)
}

/// Resolves `path` lexically under `root` and returns the normalised absolute path.
#[pyfunction]
fn workspace_path(root: &Bound<'_, PyString>, path: &Bound<'_, PyString>) -> PyResult<String> {
    policy::workspace_path(text(root)?, text(path)?).map_err(policy_error)
}

/// A fresh id of `kind` (`ws`, `ex`, `fw` or `sn`).
#[pyfunction]
fn new_id(kind: &Bound<'_, PyString>) -> PyResult<String> {
    policy::new_id(text(kind)?).map_err(policy_error)
}

/// Checks that `text` is an id of `kind` and returns it unchanged.
#[pyfunction]
fn check_id(kind: &Bound<'_, PyString>, text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::check_id(self::text(kind)?, self::text(text)?).map_err(policy_error)
}

/// The shape of an id of `kind` as a regular expression (a schema's `pattern`): exactly what
/// `check_id` accepts.
#[pyfunction]
fn id_pattern(kind: &Bound<'_, PyString>) -> PyResult<String> {
    let kind = policy::IdKind::parse(text(kind)?).map_err(policy_error)?;
    Ok(policy::id_pattern(&[kind]))
}

/// The shape of a Modal function-call id (a schema's `pattern`).
#[pyfunction]
fn function_call_id_pattern() -> String {
    policy::function_call_id_pattern()
}

/// The shape of a deployed Modal app's name (a schema's `pattern`).
#[pyfunction]
fn modal_app_name_pattern() -> String {
    policy::modal_app_name_pattern()
}

/// The shape of a template's name (a schema's `pattern`).
#[pyfunction]
fn template_name_pattern() -> String {
    policy::template_name_pattern()
}

/// Checks a template's name and returns it unchanged.
#[pyfunction]
fn template_name(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::template_name(self::text(text)?).map_err(policy_error)
}

/// Checks an environment variable name and returns it unchanged.
#[pyfunction]
fn env_name(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::env_name(self::text(text)?).map_err(policy_error)
}

/// Checks that `name` is a valid Modal object name listed in `allowlist` (the value of the
/// setting called `setting`) and returns it.
#[pyfunction]
fn allowed(
    name: &Bound<'_, PyString>,
    allowlist: Vec<Bound<'_, PyString>>,
    setting: &Bound<'_, PyString>,
) -> PyResult<String> {
    // An entry that is not valid Unicode can never equal a valid name; lossy is exact enough.
    let allowlist: Vec<_> = allowlist.iter().map(|s| s.to_string_lossy()).collect();
    policy::allowed(text(name)?, &allowlist, &setting.to_string_lossy()).map_err(policy_error)
}

/// Checks the tags a client asks to put on a workspace (count, key shape, managed keys, values)
/// and returns the same dict.
#[pyfunction]
fn caller_tags<'py>(tags: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
    let mut pairs = Vec::with_capacity(tags.len());
    for (key, value) in tags.iter() {
        let (Ok(key), Ok(value)) = (key.cast_into::<PyString>(), value.cast_into::<PyString>())
        else {
            return Err(policy_error(PolicyError::without_echo(
                "tag.not-text",
                "tag keys and values must be strings",
            )));
        };
        pairs.push((text(&key)?.to_owned(), text(&value)?.to_owned()));
    }
    policy::caller_tags(&pairs).map_err(policy_error)?;
    Ok(tags.clone())
}

/// Checks one tag a driver is asked to store; `fixed` is the value a workspace tag already has.
#[pyfunction]
#[pyo3(signature = (key, value, fixed=None))]
fn stored_tag(
    key: &Bound<'_, PyString>,
    value: &Bound<'_, PyString>,
    fixed: Option<&Bound<'_, PyString>>,
) -> PyResult<()> {
    let fixed = fixed.map(text).transpose()?;
    policy::stored_tag(text(key)?, text(value)?, fixed).map_err(policy_error)
}

/// Checks an idempotency key and returns it unchanged.
#[pyfunction]
fn idempotency_key(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::idempotency_key(self::text(text)?).map_err(policy_error)
}

/// Parses a patch (`format` "unified" or "apply_patch", detected when `None`) and checks every
/// path it names under `root` as the agent will; returns the format's name.
#[pyfunction]
#[pyo3(signature = (text, format=None, root="/workspace"))]
fn check_patch(text: &Bound<'_, PyString>, format: Option<&str>, root: &str) -> PyResult<String> {
    let format = match format {
        None => None,
        Some(name) => Some(Format::from_name(name).ok_or_else(|| {
            policy_error(PolicyError::new(
                "patch.format",
                "the format must be 'unified' or 'apply_patch'",
                name,
            ))
        })?),
    };
    let mut patch = Patch::parse(self::text(text)?, format).map_err(policy_error)?;
    patch
        .check_paths(root, |p| policy::workspace_path(root, &under_root(p)))
        .map_err(policy_error)?;
    Ok(patch.format.name().to_owned())
}

/// Checks a snapshot's label and returns it unchanged.
#[pyfunction]
fn snapshot_label(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::snapshot_label(self::text(text)?).map_err(policy_error)
}

/// Checks where a volume may be mounted and returns the path in canonical form.
#[pyfunction]
fn volume_mount(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::volume_mount(self::text(text)?).map_err(policy_error)
}

/// Parses the secret allowlist setting into `{name: (VAR, ...)}`, in the setting's order.
#[pyfunction]
fn secret_allowlist<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyDict>> {
    let parsed = policy::secret_allowlist(self::text(text)?).map_err(policy_error)?;
    let out = PyDict::new(py);
    for secret in parsed {
        out.set_item(secret.name, PyTuple::new(py, secret.keys)?)?;
    }
    Ok(out)
}

/// Parses an allowlist setting of names only (volumes).
#[pyfunction]
fn name_allowlist(text: &Bound<'_, PyString>) -> PyResult<Vec<String>> {
    policy::name_allowlist(self::text(text)?).map_err(policy_error)
}

/// Parses the allowlist of deployed functions (`APP/FUNCTION,…`).
#[pyfunction]
fn function_allowlist(text: &Bound<'_, PyString>) -> PyResult<Vec<String>> {
    policy::function_allowlist(self::text(text)?).map_err(policy_error)
}

/// Checks that function `function` of app `app` is allowlisted; returns `app/function`.
#[pyfunction]
fn allowed_function(
    app: &Bound<'_, PyString>,
    function: &Bound<'_, PyString>,
    allowlist: Vec<Bound<'_, PyString>>,
    setting: &Bound<'_, PyString>,
) -> PyResult<String> {
    // An entry that is not valid Unicode can never equal a valid name; lossy is exact enough.
    let allowlist: Vec<_> = allowlist.iter().map(|s| s.to_string_lossy()).collect();
    policy::allowed_function(
        text(app)?,
        text(function)?,
        &allowlist,
        &setting.to_string_lossy(),
    )
    .map_err(policy_error)
}

/// Checks a deployed app's name.
#[pyfunction]
fn modal_app_name(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::modal_app_name(self::text(text)?).map_err(policy_error)
}

/// Checks a function's name inside a deployed app.
#[pyfunction]
fn modal_function_name(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::modal_function_name(self::text(text)?).map_err(policy_error)
}

/// Checks a Modal function-call id.
#[pyfunction]
fn function_call_id(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::function_call_id(self::text(text)?).map_err(policy_error)
}

/// Checks a CPU request in cores and returns it canonical (whole thousandths).
#[pyfunction]
fn cpu_cores(value: f64) -> PyResult<f64> {
    policy::cpu_cores(value).map_err(policy_error)
}

/// Checks a hard CPU limit in cores against the request (None: none given).
#[pyfunction]
#[pyo3(signature = (request, limit))]
fn cpu_limit(request: Option<f64>, limit: f64) -> PyResult<f64> {
    policy::cpu_limit(request, limit).map_err(policy_error)
}

/// Checks a memory request in MiB and returns it.
#[pyfunction]
fn memory_mib(value: i64) -> PyResult<i64> {
    policy::memory_mib(value).map_err(policy_error)
}

/// Checks a hard memory limit in MiB against the request (None: none given).
#[pyfunction]
#[pyo3(signature = (request, limit))]
fn memory_limit_mib(request: Option<i64>, limit: i64) -> PyResult<i64> {
    policy::memory_limit_mib(request, limit).map_err(policy_error)
}

/// Checks one region name and returns it lowercased.
#[pyfunction]
fn region(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::region(self::text(text)?).map_err(policy_error)
}

/// Checks one outbound CIDR and returns it canonical.
#[pyfunction]
fn outbound_cidr(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::outbound_cidr(self::text(text)?).map_err(policy_error)
}

/// Checks one outbound domain and returns it canonical.
#[pyfunction]
fn outbound_domain(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::outbound_domain(self::text(text)?).map_err(policy_error)
}

/// A whole number as the port rules read it: one past any `i64` (a Python int of any size)
/// stays out of range, on its own side.
fn port_number(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(n) = value.extract::<i64>() {
        return Ok(n);
    }
    let positive = value.gt(0)?;
    Ok(if positive { i64::MAX } else { i64::MIN })
}

/// Checks one preview port (a TCP port a workspace declared, 1024 to 65535).
#[pyfunction]
fn preview_port(port: &Bound<'_, PyAny>) -> PyResult<u16> {
    policy::preview_port(port_number(port)?).map_err(policy_error)
}

/// Checks the preview zone an operator names; returns it canonical.
#[pyfunction]
fn preview_host(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::preview_host(self::text(text)?).map_err(policy_error)
}

/// The host name a preview of `port` of `workspace_id` is served on, under the zone `host`.
#[pyfunction]
fn preview_origin_host(
    host: &Bound<'_, PyString>,
    workspace_id: &Bound<'_, PyString>,
    port: &Bound<'_, PyAny>,
) -> PyResult<String> {
    policy::preview_origin_host(text(host)?, text(workspace_id)?, port_number(port)?)
        .map_err(policy_error)
}

/// What a request's `Host` names under the preview zone `zone`: None for the gateway's own
/// pages, `(workspace_id, port)` for a preview; any other name under the zone is refused.
#[pyfunction]
fn preview_host_target(
    host: &Bound<'_, PyString>,
    zone: &Bound<'_, PyString>,
) -> PyResult<Option<(String, u16)>> {
    match policy::preview_host_target(text(host)?, text(zone)?).map_err(policy_error)? {
        policy::HostTarget::Gateway => Ok(None),
        policy::HostTarget::Preview { workspace_id, port } => Ok(Some((workspace_id, port))),
    }
}

/// Checks the ports a workspace declares for previews; returns them without repeats.
#[pyfunction]
fn preview_ports(ports: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<u16>> {
    let ports = ports
        .iter()
        .map(port_number)
        .collect::<PyResult<Vec<_>>>()?;
    policy::preview_ports(&ports).map_err(policy_error)
}

/// Checks the regions a workspace may run in and returns them canonical, without repeats.
#[pyfunction]
fn regions(names: Vec<Bound<'_, PyString>>) -> PyResult<Vec<String>> {
    let names = names.iter().map(text).collect::<PyResult<Vec<_>>>()?;
    policy::regions(&names).map_err(policy_error)
}

/// Checks a workspace's outbound CIDR and domain allowlists (either may be None) against
/// each other, `block_network` and their rules; returns them canonical, without repeats.
#[pyfunction]
#[pyo3(signature = (block_network, cidrs=None, domains=None))]
fn outbound_allowlists(
    block_network: bool,
    cidrs: Option<Vec<Bound<'_, PyString>>>,
    domains: Option<Vec<Bound<'_, PyString>>>,
) -> PyResult<policy::Allowlists> {
    let texts = |list: &Option<Vec<Bound<'_, PyString>>>| {
        list.as_ref()
            .map(|l| {
                l.iter()
                    .map(|s| text(s).map(str::to_owned))
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()
    };
    let (cidrs, domains) = (texts(&cidrs)?, texts(&domains)?);
    policy::outbound_allowlists(block_network, cidrs.as_deref(), domains.as_deref())
        .map_err(policy_error)
}

/// Checks a GPU request (`TYPE` or `TYPE:N`) and returns it as Modal writes it.
#[pyfunction]
fn gpu(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::gpu(self::text(text)?).map_err(policy_error)
}

/// Parses the GPU allowlist setting (`T4,H100:2`) into its canonical entries.
#[pyfunction]
fn gpu_allowlist(text: &Bound<'_, PyString>) -> PyResult<Vec<String>> {
    policy::gpu_allowlist(self::text(text)?).map_err(policy_error)
}

/// Checks a GPU request against the allowlist's entries; returns the request canonical.
#[pyfunction]
fn allowed_gpu(
    request: &Bound<'_, PyString>,
    allowlist: Vec<Bound<'_, PyString>>,
    setting: &Bound<'_, PyString>,
) -> PyResult<String> {
    // An entry that is not valid Unicode can never be a GPU type; lossy is exact enough.
    let allowlist: Vec<_> = allowlist.iter().map(|s| s.to_string_lossy()).collect();
    policy::allowed_gpu(text(request)?, &allowlist, &setting.to_string_lossy())
        .map_err(policy_error)
}

/// Checks a published image's name (`NAME` or `NAME:TAG`).
#[pyfunction]
fn image_name(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::image_name(self::text(text)?).map_err(policy_error)
}

/// Checks an image id (`im-…`).
#[pyfunction]
fn image_id(text: &Bound<'_, PyString>) -> PyResult<String> {
    policy::image_id(self::text(text)?).map_err(policy_error)
}

/// Checks a list of `apt` or `pip` packages for an image layer; returns it without duplicates.
#[pyfunction]
fn image_packages(kind: &Bound<'_, PyString>, items: Vec<String>) -> PyResult<Vec<String>> {
    policy::image_packages(self::text(kind)?, &items).map_err(policy_error)
}

/// A download link's token for `path` in `workspace_id`, valid until `expires` (unix seconds).
#[pyfunction]
fn mint_link(
    key: &[u8],
    workspace_id: &Bound<'_, PyString>,
    path: &Bound<'_, PyString>,
    expires: u64,
) -> PyResult<String> {
    policy::mint_link(key, text(workspace_id)?, text(path)?, expires).map_err(policy_error)
}

/// What a download link's token names, `(workspace_id, path, expires)`, when `key` signed it
/// and it has not expired at `now`.
#[pyfunction]
fn verify_link(
    key: &[u8],
    token: &Bound<'_, PyString>,
    now: u64,
) -> PyResult<(String, String, u64)> {
    let claim = policy::verify_link(key, text(token)?, now).map_err(policy_error)?;
    Ok((claim.workspace_id, claim.path, claim.expires))
}

/// A ticket for `purpose` on `object` in `workspace_id`, valid `seconds` from `now`, and its
/// expiry (unix seconds).
#[pyfunction]
fn mint_ticket(
    key: &[u8],
    purpose: &Bound<'_, PyString>,
    workspace_id: &Bound<'_, PyString>,
    object: &Bound<'_, PyString>,
    now: u64,
    seconds: u64,
) -> PyResult<(String, u64)> {
    policy::mint_ticket(
        key,
        text(purpose)?,
        text(workspace_id)?,
        text(object)?,
        now,
        seconds,
    )
    .map_err(policy_error)
}

/// What a ticket grants, `(workspace_id, object, expires)`, when `key` signed it for `purpose`
/// (and, where given, `workspace_id` and `object`) and it is live at `now`.
#[pyfunction]
#[pyo3(signature = (key, ticket, purpose, now, workspace_id=None, object=None))]
fn verify_ticket(
    key: &[u8],
    ticket: &Bound<'_, PyString>,
    purpose: &Bound<'_, PyString>,
    now: u64,
    workspace_id: Option<&Bound<'_, PyString>>,
    object: Option<&Bound<'_, PyString>>,
) -> PyResult<(String, String, u64)> {
    let workspace_id = workspace_id.map(text).transpose()?;
    let object = object.map(text).transpose()?;
    let claim = policy::verify_ticket(
        key,
        text(ticket)?,
        text(purpose)?,
        workspace_id,
        object,
        now,
    )
    .map_err(policy_error)?;
    Ok((claim.workspace_id, claim.object, claim.expires))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGitHubRepo>()?;
    m.add_function(wrap_pyfunction!(github_repo, m)?)?;
    m.add_function(wrap_pyfunction!(github_base, m)?)?;
    m.add_function(wrap_pyfunction!(git_ref, m)?)?;
    m.add_function(wrap_pyfunction!(commit_message, m)?)?;
    m.add_function(wrap_pyfunction!(author_name, m)?)?;
    m.add_function(wrap_pyfunction!(author_email, m)?)?;
    m.add_function(wrap_pyfunction!(pull_request_title, m)?)?;
    m.add_function(wrap_pyfunction!(pull_request_body, m)?)?;
    m.add_function(wrap_pyfunction!(workspace_path, m)?)?;
    m.add_function(wrap_pyfunction!(new_id, m)?)?;
    m.add_function(wrap_pyfunction!(check_id, m)?)?;
    m.add_function(wrap_pyfunction!(id_pattern, m)?)?;
    m.add_function(wrap_pyfunction!(function_call_id_pattern, m)?)?;
    m.add_function(wrap_pyfunction!(modal_app_name_pattern, m)?)?;
    m.add_function(wrap_pyfunction!(template_name, m)?)?;
    m.add_function(wrap_pyfunction!(template_name_pattern, m)?)?;
    m.add_function(wrap_pyfunction!(env_name, m)?)?;
    m.add_function(wrap_pyfunction!(allowed, m)?)?;
    m.add_function(wrap_pyfunction!(caller_tags, m)?)?;
    m.add_function(wrap_pyfunction!(stored_tag, m)?)?;
    m.add_function(wrap_pyfunction!(idempotency_key, m)?)?;
    m.add_function(wrap_pyfunction!(snapshot_label, m)?)?;
    m.add_function(wrap_pyfunction!(check_patch, m)?)?;
    m.add("MAX_PATCH_BYTES", crate::patch::MAX_PATCH_BYTES)?;
    m.add("MAX_PATCH_FILES", crate::patch::MAX_PATCH_FILES)?;
    m.add_function(wrap_pyfunction!(volume_mount, m)?)?;
    m.add_function(wrap_pyfunction!(image_name, m)?)?;
    m.add_function(wrap_pyfunction!(image_id, m)?)?;
    m.add_function(wrap_pyfunction!(image_packages, m)?)?;
    m.add_function(wrap_pyfunction!(mint_link, m)?)?;
    m.add_function(wrap_pyfunction!(verify_link, m)?)?;
    m.add_function(wrap_pyfunction!(mint_ticket, m)?)?;
    m.add_function(wrap_pyfunction!(verify_ticket, m)?)?;
    m.add("MAX_TICKET_SECONDS", policy::MAX_TICKET_SECONDS)?;
    m.add("MAX_IMAGE_PACKAGES", policy::MAX_IMAGE_PACKAGES)?;
    m.add_function(wrap_pyfunction!(secret_allowlist, m)?)?;
    m.add_function(wrap_pyfunction!(name_allowlist, m)?)?;
    m.add_function(wrap_pyfunction!(function_allowlist, m)?)?;
    m.add_function(wrap_pyfunction!(allowed_function, m)?)?;
    m.add_function(wrap_pyfunction!(modal_app_name, m)?)?;
    m.add_function(wrap_pyfunction!(modal_function_name, m)?)?;
    m.add_function(wrap_pyfunction!(function_call_id, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_cores, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory_mib, m)?)?;
    m.add_function(wrap_pyfunction!(memory_limit_mib, m)?)?;
    m.add_function(wrap_pyfunction!(region, m)?)?;
    m.add_function(wrap_pyfunction!(outbound_cidr, m)?)?;
    m.add_function(wrap_pyfunction!(outbound_domain, m)?)?;
    m.add_function(wrap_pyfunction!(regions, m)?)?;
    m.add_function(wrap_pyfunction!(preview_port, m)?)?;
    m.add_function(wrap_pyfunction!(preview_ports, m)?)?;
    m.add_function(wrap_pyfunction!(preview_host, m)?)?;
    m.add_function(wrap_pyfunction!(preview_origin_host, m)?)?;
    m.add_function(wrap_pyfunction!(preview_host_target, m)?)?;
    m.add_function(wrap_pyfunction!(outbound_allowlists, m)?)?;
    m.add_function(wrap_pyfunction!(gpu, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_allowlist, m)?)?;
    m.add_function(wrap_pyfunction!(allowed_gpu, m)?)?;
    // The managed tag names have this one home; Python reads them from here.
    let py = m.py();
    m.add("MANAGED_TAGS", PyTuple::new(py, policy::MANAGED_TAGS)?)?;
    m.add(
        "MANAGED_TAG_PREFIXES",
        PyTuple::new(py, policy::MANAGED_TAG_PREFIXES)?,
    )?;
    m.add("WORKSPACE_TAGS", PyTuple::new(py, policy::WORKSPACE_TAGS)?)?;
    m.add("IDEMPOTENCY_TAG", policy::IDEMPOTENCY_TAG)?;
    m.add("MAX_TAGS", policy::MAX_TAGS)?;
    // The resource bounds have this one home; the operations' field limits read them.
    m.add("MIN_CPU_CORES", policy::MIN_CPU_CORES)?;
    m.add("MAX_CPU_CORES", policy::MAX_CPU_CORES)?;
    m.add("MIN_MEMORY_MIB", policy::MIN_MEMORY_MIB)?;
    m.add("MAX_MEMORY_MIB", policy::MAX_MEMORY_MIB)?;
    m.add("MAX_REGIONS", policy::MAX_REGIONS)?;
    m.add("MIN_PREVIEW_PORT", policy::MIN_PREVIEW_PORT)?;
    m.add("MAX_PREVIEW_PORTS", policy::MAX_PREVIEW_PORTS)?;
    m.add("MAX_ALLOWLIST_ENTRIES", policy::MAX_LIST_ENTRIES)?;
    let gpu_types: Vec<(&str, u32)> = policy::GPU_TYPES.to_vec();
    m.add("GPU_TYPES", PyTuple::new(py, gpu_types)?)?;
    m.add("MAX_GPU_COUNT", policy::MAX_GPU_COUNT)?;
    Ok(())
}

"""The policies' Python surface: types, attributes, errors, and random input.

The rules themselves are specified by the Rust tests beside them; these tests pin down what a
Python caller sees. `HYPOTHESIS_PROFILE=long` runs the property tests for much longer.
"""

import os
import re
import unicodedata

import modal_workspace_core as mwc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from modal_workspace_core import policy
from modal_workspace_core.policy import PolicyError

# Profiles are applied per test (not loaded globally) so other test modules keep their settings.
settings.register_profile(
    "policy", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PROFILE = settings.get_profile(
    "long" if os.environ.get("HYPOTHESIS_PROFILE") == "long" else "policy"
)

ROOT = "/workspace"
HEX32 = re.compile(r"[0-9a-f]{32}")
# A message quotes at most 32 characters of the input, so it stays short whatever was sent.
MAX_MESSAGE_CHARS = 400


def test_policy_module_reexports_the_core_functions() -> None:
    assert set(policy.__all__) == {
        "IDEMPOTENCY_TAG",
        "MANAGED_TAGS",
        "MANAGED_TAG_PREFIXES",
        "MAX_IMAGE_PACKAGES",
        "MAX_TAGS",
        "WORKSPACE_TAGS",
        "GitHubRepo",
        "PolicyError",
        "allowed",
        "caller_tags",
        "check_id",
        "commit_message",
        "env_name",
        "git_ref",
        "github_repo",
        "idempotency_key",
        "image_id",
        "image_name",
        "image_packages",
        "snapshot_label",
        "volume_mount",
        "github_base",
        "name_allowlist",
        "new_id",
        "secret_allowlist",
        "stored_tag",
        "template_name",
        "template_name_pattern",
        "workspace_path",
        "allowed_function",
        "author_email",
        "author_name",
        "function_allowlist",
        "function_call_id",
        "modal_app_name",
        "modal_function_name",
        # The resource rules (src/policy/resources/).
        "MAX_ALLOWLIST_ENTRIES",
        "MAX_CPU_CORES",
        "MAX_MEMORY_MIB",
        "MAX_REGIONS",
        "MIN_CPU_CORES",
        "MIN_MEMORY_MIB",
        "cpu_cores",
        "cpu_limit",
        "memory_limit_mib",
        "memory_mib",
        "outbound_allowlists",
        "outbound_cidr",
        "outbound_domain",
        "MAX_PREVIEW_PORTS",
        "MIN_PREVIEW_PORT",
        "preview_port",
        "preview_ports",
        "preview_host",
        "preview_host_target",
        "preview_origin_host",
        "MAX_PATCH_BYTES",
        "MAX_PATCH_FILES",
        "check_patch",
        "pull_request_body",
        "pull_request_title",
        "region",
        "regions",
        "GPU_TYPES",
        "MAX_GPU_COUNT",
        "gpu",
        "gpu_allowlist",
        "allowed_gpu",
        "function_call_id_pattern",
        "id_pattern",
        "modal_app_name_pattern",
    }
    for name in policy.__all__:
        assert getattr(policy, name) is getattr(mwc._core, name)
    assert policy.PolicyError is mwc.PolicyError


def test_github_repo_returns_owner_name_slug_and_url() -> None:
    repo = policy.github_repo("https://GitHub.com/Octo/Hello.git/")
    assert isinstance(repo, policy.GitHubRepo)
    assert (repo.owner, repo.name) == ("Octo", "Hello")
    assert repo.slug == "Octo/Hello"
    assert repo.url == "https://github.com/Octo/Hello.git"
    assert repr(repo) == "GitHubRepo(owner='Octo', name='Hello')"


def test_github_repo_is_frozen() -> None:
    repo = policy.github_repo("o/r")
    with pytest.raises(AttributeError):
        repo.owner = "evil"  # type: ignore[misc]
    assert repo.owner == "o"


def test_github_repos_compare_and_hash_by_value() -> None:
    a = policy.github_repo("o/r")
    b = policy.github_repo("https://github.com/o/r.git")
    assert a == b
    assert hash(a) == hash(b)
    assert a != policy.github_repo("o/r2")
    assert a != "o/r"
    assert len({a, b}) == 1


def test_a_rejection_is_a_value_error_carrying_the_rule() -> None:
    with pytest.raises(PolicyError) as info:
        policy.github_repo("https://www.github.com/o/r")
    assert isinstance(info.value, ValueError)
    assert info.value.rule == "repo.host"
    assert "github.com" in str(info.value)


def test_a_token_in_userinfo_is_never_echoed() -> None:
    with pytest.raises(PolicyError) as info:
        policy.github_repo("https://ghp_x@github.com/o/r")
    assert info.value.rule == "repo.userinfo"
    assert "ghp_" not in str(info.value)
    assert "@" not in str(info.value)


def test_a_token_in_the_path_is_never_echoed() -> None:
    with pytest.raises(PolicyError) as info:
        policy.github_repo("ghp_0123456789abcdefghij/o/r")
    assert "ghp_" not in str(info.value)


def test_messages_quote_only_a_bounded_prefix() -> None:
    with pytest.raises(PolicyError) as info:
        policy.git_ref("bad name " + "x" * 10_000)
    assert info.value.rule == "ref.too-long"
    assert len(str(info.value)) < MAX_MESSAGE_CHARS
    assert "'bad name xxx" in str(info.value)


def test_git_ref_returns_valid_names_unchanged() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    for name in ["main", "feature/x", "v1.2.3", sha]:
        assert policy.git_ref(name) == name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("a..b", "ref.double-dot"),
        ("-rf", "ref.leading-dash"),
        ("+main", "ref.leading-plus"),
        ("HEAD", "ref.head"),
        ("main@{1}", "ref.at-brace"),
        ("x.lock", "ref.lock-suffix"),
    ],
)
def test_git_ref_names_the_rule_that_failed(name: str, rule: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy.git_ref(name)
    assert info.value.rule == rule


def test_workspace_path_normalises_inside_the_root() -> None:
    assert policy.workspace_path(ROOT, ".") == ROOT
    assert policy.workspace_path(ROOT, "a/./b/../c/") == "/workspace/a/c"
    assert policy.workspace_path(ROOT, "/workspace/src") == "/workspace/src"


def test_workspace_path_refuses_to_climb_out_even_to_come_back() -> None:
    with pytest.raises(PolicyError) as info:
        policy.workspace_path(ROOT, "../workspace/a")
    assert info.value.rule == "path.escapes-root"
    with pytest.raises(PolicyError) as info:
        policy.workspace_path(ROOT, "/etc/passwd")
    assert info.value.rule == "path.outside-root"


def test_new_id_is_kind_dash_32_lowercase_hex() -> None:
    for kind in ["ws", "ex", "fw", "sn"]:
        new = policy.new_id(kind)  # type: ignore[arg-type]
        prefix, digits = new.split("-")
        assert prefix == kind
        assert HEX32.fullmatch(digits)
        assert policy.check_id(kind, new) == new  # type: ignore[arg-type]
    assert policy.new_id("ws") != policy.new_id("ws")


def test_an_unknown_id_kind_is_named() -> None:
    with pytest.raises(PolicyError) as info:
        policy.new_id("zz")  # type: ignore[arg-type]
    assert info.value.rule == "id.kind"
    assert "'zz'" in str(info.value)


def test_check_id_rejects_an_id_of_another_kind() -> None:
    with pytest.raises(PolicyError) as info:
        policy.check_id("ws", policy.new_id("ex"))
    assert info.value.rule == "id.prefix"
    assert "workspace id" in str(info.value)


def test_env_name_accepts_identifiers_only() -> None:
    assert policy.env_name("GITHUB_TOKEN") == "GITHUB_TOKEN"
    with pytest.raises(PolicyError) as info:
        policy.env_name("1X")
    assert info.value.rule == "env.first-char"


def test_allowed_denies_by_default_and_names_the_setting() -> None:
    with pytest.raises(PolicyError) as info:
        policy.allowed("github", [], "SECRET_ALLOWLIST")
    assert info.value.rule == "allowlist.denied"
    assert "SECRET_ALLOWLIST" in str(info.value)


def test_allowed_matches_exactly_and_never_lists_the_others() -> None:
    allowlist = ("prod-db-password", "github")
    assert policy.allowed("github", allowlist, "SECRET_ALLOWLIST") == "github"
    with pytest.raises(PolicyError) as info:
        policy.allowed("GitHub", allowlist, "SECRET_ALLOWLIST")
    assert "prod-db-password" not in str(info.value)


def test_allowed_refuses_a_bare_string_as_the_list() -> None:
    with pytest.raises(TypeError):
        # A str is a Sequence[str] to a type checker, so only the runtime can catch this.
        policy.allowed("a", "a", "SECRET_ALLOWLIST")


def test_the_managed_tag_names_come_from_the_core() -> None:
    assert policy.WORKSPACE_TAGS == ("managed-by", "workspace-id", "workspace-root", "created-at")
    assert (*policy.WORKSPACE_TAGS, policy.IDEMPOTENCY_TAG) == policy.MANAGED_TAGS
    assert policy.IDEMPOTENCY_TAG == "idempotency-key"
    assert policy.MANAGED_TAG_PREFIXES == ("repo-", "mwc-")
    assert policy.MAX_TAGS == 32


def test_caller_tags_returns_the_same_dict_or_names_the_rule() -> None:
    tags = {"team": "a", "owner": "Zoë"}
    assert policy.caller_tags(tags) is tags
    for bad, rule in [
        ({"created-at": "now"}, "tag.managed"),
        ({"repo-url": "x"}, "tag.managed"),
        ({"bad key": "v"}, "tag.key-chars"),
        ({"k": "line\nbreak"}, "tag.value-chars"),
        ({"k": "x" * 257}, "tag.value-too-long"),
        ({f"k{i}": "v" for i in range(33)}, "tag.too-many"),
        ({"k": "v\ud800"}, "text.not-unicode"),
    ]:
        with pytest.raises(PolicyError) as info:
            policy.caller_tags(bad)
        assert info.value.rule == rule, bad


def test_stored_tag_keeps_workspace_tags_and_takes_the_service_ones() -> None:
    policy.stored_tag("workspace-id", "ws-1", "ws-1")
    policy.stored_tag("repo-path", "/workspace/" + "d" * 300)
    policy.stored_tag("idempotency-key", "k")
    with pytest.raises(PolicyError) as info:
        policy.stored_tag("workspace-id", "ws-2", "ws-1")
    assert info.value.rule == "tag.managed"
    with pytest.raises(PolicyError):
        policy.stored_tag("created-at", "now")


def test_idempotency_key_returns_valid_keys_unchanged() -> None:
    assert policy.idempotency_key("retry:1.a_b-c") == "retry:1.a_b-c"
    with pytest.raises(PolicyError) as info:
        policy.idempotency_key("a b")
    assert info.value.rule == "idempotency-key.chars"


def test_secret_allowlist_maps_names_to_their_listed_variables() -> None:
    assert policy.secret_allowlist("openai:OPENAI_API_KEY:ORG, github,") == {
        "openai": ("OPENAI_API_KEY", "ORG"),
        "github": (),
    }
    assert list(policy.secret_allowlist("b,a")) == ["b", "a"]
    with pytest.raises(PolicyError) as info:
        policy.secret_allowlist("openai:1BAD")
    assert info.value.rule == "env.first-char"
    assert policy.name_allowlist("cache, data") == ["cache", "data"]
    with pytest.raises(PolicyError) as info:
        policy.name_allowlist("cache:X")
    assert info.value.rule == "allowlist.keys"


def test_a_lone_surrogate_is_a_policy_error() -> None:
    with pytest.raises(PolicyError) as info:
        policy.git_ref("main\ud800")
    assert info.value.rule == "text.not-unicode"


# Any text, including lone surrogates, which Python strings can hold but UTF-8 cannot.
any_text = st.lists(
    st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)), max_size=300
).map("".join)


def _policy_error_or(call: object) -> object:
    """Runs `call`; a PolicyError is an answer, anything else propagates and fails the test."""
    assert callable(call)
    try:
        return call()
    except PolicyError as err:
        assert err.rule
        assert len(str(err)) < MAX_MESSAGE_CHARS
        return None


@PROFILE
@given(any_text)
def test_github_repo_raises_only_policy_errors(text: str) -> None:
    repo = _policy_error_or(lambda: policy.github_repo(text))
    if isinstance(repo, policy.GitHubRepo):
        assert policy.github_repo(repo.url) == repo
        assert policy.github_repo(repo.slug) == repo


@PROFILE
@given(any_text)
def test_git_ref_raises_only_policy_errors(text: str) -> None:
    out = _policy_error_or(lambda: policy.git_ref(text))
    if out is not None:
        assert out == text


@PROFILE
@given(any_text)
def test_workspace_path_raises_only_policy_errors(text: str) -> None:
    out = _policy_error_or(lambda: policy.workspace_path(ROOT, text))
    if isinstance(out, str):
        assert out == ROOT or out.startswith(ROOT + "/")
        assert policy.workspace_path(ROOT, out) == out


@PROFILE
@given(any_text, any_text)
def test_ids_names_and_allowlists_raise_only_policy_errors(a: str, b: str) -> None:
    _policy_error_or(lambda: policy.check_id(a, b))  # type: ignore[arg-type]
    _policy_error_or(lambda: policy.new_id(a))  # type: ignore[arg-type]
    _policy_error_or(lambda: policy.env_name(a))
    _policy_error_or(lambda: policy.allowed(a, [b], "VOLUME_ALLOWLIST"))


@PROFILE
@given(st.dictionaries(any_text, any_text, max_size=40), any_text)
def test_tags_idempotency_keys_and_allowlist_settings_raise_only_policy_errors(
    tags: dict[str, str], text: str
) -> None:
    out = _policy_error_or(lambda: policy.caller_tags(tags))
    if out is not None:
        assert out is tags
        assert len(tags) <= policy.MAX_TAGS
        # Categories that are stable across Unicode versions (Python's and the core's tables
        # may differ on characters assigned lately, so `str.isprintable` is not the oracle).
        text_of_values = "".join(tags.values())
        assert not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text_of_values)
    assert _policy_error_or(lambda: policy.idempotency_key(text)) in (None, text)
    _policy_error_or(lambda: policy.secret_allowlist(text))
    _policy_error_or(lambda: policy.name_allowlist(text))


def test_image_policies_refuse_what_could_reach_a_shell_or_another_source() -> None:
    assert policy.image_packages("apt", ["git", "git", "jq=1.6-2.1"]) == ["git", "jq=1.6-2.1"]
    assert policy.image_packages("pip", ["numpy==2.1.3"]) == ["numpy==2.1.3"]
    for kind, item, rule in [
        ("apt", "-oDebug::pkgProblemResolver=1", "package.apt-name"),
        ("apt", "git\nrm", "package.apt-name"),
        ("pip", "-r/etc/passwd", "package.pip-name"),
        ("pip", "x==1; os_name=='nt'", "package.pip-version"),
    ]:
        with pytest.raises(PolicyError) as caught:
            policy.image_packages(kind, [item])
        assert caught.value.rule == rule
    too_many = [f"p{i}" for i in range(policy.MAX_IMAGE_PACKAGES + 1)]
    with pytest.raises(PolicyError, match="at most 32"):
        policy.image_packages("pip", too_many)
    assert policy.image_name("tools:v2") == "tools:v2"
    with pytest.raises(PolicyError):
        policy.image_id("im-../x")

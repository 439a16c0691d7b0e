"""The extension builds, imports, and exposes the error family."""

import modal_workspace_core as mwc


def test_version_matches_the_crate() -> None:
    assert mwc.__version__ == "0.1.0"


def test_policy_error_is_a_value_error() -> None:
    assert issubclass(mwc.PolicyError, ValueError)

//! Region names in the forms Modal documents for `region=`: a broad area (`us`, `eu`, `ap`), a
//! narrower one (`us-east`, `eu-west`) or one cloud's region (`us-east-1`, `us-central1`,
//! `us-ashburn-1`). Modal's list changes, so the shape is checked here and the name itself by
//! Modal, which refuses one it does not run in.

use crate::policy::error::PolicyError;

/// Longest region name accepted.
pub const MAX_REGION_CHARS: usize = 32;
/// The most `-`-separated parts of a name (`us-east-1-atl-1` has five).
const MAX_PARTS: usize = 5;

/// One region name, lowercased.
pub fn region(text: &str) -> Result<String, PolicyError> {
    let what = "a region is lowercase letters and digits in up to five '-'-separated parts, \
                starting with a letter (us, us-east, us-east-1)";
    let name = text.to_ascii_lowercase();
    let parts: Vec<&str> = name.split('-').collect();
    let ok = !name.is_empty()
        && name.len() <= MAX_REGION_CHARS
        && parts.len() <= MAX_PARTS
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !ok {
        return Err(PolicyError::new("region.shape", what, text));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modals_documented_forms_pass_lowercased() {
        for name in [
            "us",
            "eu",
            "ap",
            "us-east",
            "us-west",
            "eu-west",
            "us-east-1",
            "us-central1",
            "us-ashburn-1",
            "asia-northeast1",
            "westus2",
            "us-east-1-atl-1",
        ] {
            assert_eq!(region(name).unwrap(), name);
        }
        assert_eq!(region("US-East").unwrap(), "us-east");
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "-us",
            "us-",
            "us--east",
            "1us",
            "us east",
            "us_east",
            "us.east",
            "us/east",
            "a-b-c-d-e-f",
            "ü",
            "us-east\n",
            &"a".repeat(33),
        ] {
            assert_eq!(region(bad).unwrap_err().rule, "region.shape", "{bad:?}");
        }
    }
}

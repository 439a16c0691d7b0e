//! `edit`: exact-text replacement that must match a stated number of times, keeping the file's
//! UTF-8 BOM and its line endings (LF text from the client matches and writes CRLF files).

use std::io::Read;

use serde::Serialize;

use super::error::FileError;
use super::Workspace;

/// The largest file an edit loads: edits are for source files, not data sets.
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

const BOM: &str = "\u{feff}";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditRequest {
    pub old: String,
    pub new: String,
    /// How many times `old` must occur; `None` means exactly once.
    pub expected: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EditOutcome {
    pub path: String,
    pub replacements: usize,
    pub size: u64,
    /// True when the file's CRLF endings were applied to the client's LF text.
    pub crlf: bool,
}

impl Workspace {
    /// Replaces every occurrence of `req.old` with `req.new`, provided there are exactly
    /// `req.expected` (default 1) of them; otherwise a conflict that says how many were found.
    pub fn edit(&self, path: &str, req: &EditRequest) -> Result<EditOutcome, FileError> {
        let rel = self.rel(path)?;
        if req.old.is_empty() {
            return Err(FileError::invalid(
                "'old' must not be empty: say which text to replace",
            ));
        }
        let expected = req.expected.unwrap_or(1);
        if expected == 0 {
            return Err(FileError::invalid("'expected' must be at least 1"));
        }
        let (file, size) = self.open_regular(&rel, "edit")?;
        if size > MAX_EDIT_BYTES {
            return Err(FileError::limit(format!(
                "cannot edit '{}': it is {size} bytes, more than the {MAX_EDIT_BYTES} an edit loads",
                rel.display
            )));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(MAX_EDIT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| FileError::from_io(&e, "edit", &rel.display))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            FileError::invalid(format!(
                "cannot edit '{}': it is not UTF-8 text",
                rel.display
            ))
        })?;
        let (edited, replacements, crlf) = apply(&text, req, expected).map_err(|found| {
            FileError::conflict(format!(
                "cannot edit '{}': expected {expected} occurrence{} of the old text, found {found}",
                rel.display,
                if expected == 1 { "" } else { "s" }
            ))
        })?;
        let outcome = self.write_rel(&rel, edited.as_bytes(), false)?;
        Ok(EditOutcome {
            path: outcome.path,
            replacements,
            size: outcome.size,
            crlf,
        })
    }
}

/// The edited text, how many replacements, and whether CRLF was applied; or how many
/// occurrences there were when that is not `expected`.
fn apply(text: &str, req: &EditRequest, expected: usize) -> Result<(String, usize, bool), usize> {
    let (bom, body) = match text.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", text),
    };
    // Clients speak LF. When the file is CRLF and the client's text has no CR of its own,
    // translate it, so the match works and the new lines match the file's.
    let crlf = is_crlf(body) && !req.old.contains('\r');
    let (old, new) = if crlf {
        (to_crlf(&req.old), to_crlf(&req.new))
    } else {
        (req.old.clone(), req.new.clone())
    };
    let found = body.matches(old.as_str()).count();
    if found != expected {
        return Err(found);
    }
    Ok((
        format!("{bom}{}", body.replace(old.as_str(), &new)),
        found,
        crlf,
    ))
}

/// True when most line endings are CRLF.
fn is_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count();
    crlf > 0 && crlf * 2 >= lf
}

fn to_crlf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', "\r\n")
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::super::FileErrorKind;
    use super::*;

    fn req(old: &str, new: &str, expected: Option<usize>) -> EditRequest {
        EditRequest {
            old: old.into(),
            new: new.into(),
            expected,
        }
    }

    #[test]
    fn edit_replaces_a_unique_occurrence() {
        let sb = Sandbox::new("edit-unique");
        sb.file("a.rs", "fn a() {}\nfn b() {}\n");
        let out = sb.ws().edit("a.rs", &req("fn b", "fn c", None)).unwrap();
        assert_eq!(out.replacements, 1);
        assert_eq!(sb.read("a.rs"), "fn a() {}\nfn c() {}\n");
    }

    #[test]
    fn edit_fails_with_a_conflict_that_says_how_many_it_found() {
        let sb = Sandbox::new("edit-count");
        sb.file("a.txt", "x x x");
        let ws = sb.ws();
        let err = ws.edit("a.txt", &req("x", "y", None)).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
        assert!(
            err.message
                .contains("expected 1 occurrence of the old text, found 3"),
            "{err}"
        );
        let none = ws.edit("a.txt", &req("z", "y", None)).unwrap_err();
        assert!(none.message.contains("found 0"), "{none}");
        assert_eq!(
            sb.read("a.txt"),
            "x x x",
            "a failed edit leaves the file alone"
        );
        assert_eq!(
            ws.edit("a.txt", &req("x", "y", Some(3)))
                .unwrap()
                .replacements,
            3
        );
        assert_eq!(sb.read("a.txt"), "y y y");
    }

    #[test]
    fn edit_keeps_a_bom_and_crlf_line_endings() {
        let sb = Sandbox::new("edit-crlf");
        std::fs::write(sb.at("w.txt"), "\u{feff}one\r\ntwo\r\nthree\r\n").unwrap();
        let out = sb
            .ws()
            .edit("w.txt", &req("one\ntwo\n", "uno\ndos\nmas\n", None))
            .unwrap();
        assert!(out.crlf);
        assert_eq!(sb.read("w.txt"), "\u{feff}uno\r\ndos\r\nmas\r\nthree\r\n");
    }

    #[test]
    fn edit_keeps_lf_files_lf_and_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let sb = Sandbox::new("edit-lf");
        sb.file("run.sh", "echo a\necho b\n");
        std::fs::set_permissions(sb.at("run.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
        let out = sb
            .ws()
            .edit("run.sh", &req("echo b\n", "echo c\necho d\n", None))
            .unwrap();
        assert!(!out.crlf);
        assert_eq!(sb.read("run.sh"), "echo a\necho c\necho d\n");
        let mode = std::fs::metadata(sb.at("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o751);
    }

    #[test]
    fn edit_rejects_empty_old_text_and_binary_files() {
        let sb = Sandbox::new("edit-bad");
        std::fs::write(sb.at("bin"), [0xff, 0xfe, 0x00]).unwrap();
        let ws = sb.ws();
        assert_eq!(
            ws.edit("bin", &req("", "x", None)).unwrap_err().kind,
            FileErrorKind::InvalidArgument
        );
        assert_eq!(
            ws.edit("bin", &req("a", "x", None)).unwrap_err().kind,
            FileErrorKind::InvalidArgument
        );
    }
}

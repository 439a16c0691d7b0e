//! `patch`: a parsed multi-file patch (`crate::patch`) applied all or nothing.
//!
//! Every file the patch names is located and read beneath the root (`changeset`), every hunk is
//! applied in memory, in patch order (a later part of the patch sees what an earlier one made of
//! a file), and only when every part applied is anything written: then as one change set, whose
//! failure undoes what it did. A patch whose third hunk does not apply changes nothing.

use std::collections::HashMap;

use serde::Serialize;

use super::changeset::{commit, Step, Target, TargetKey};
use super::edit::MAX_EDIT_BYTES;
use super::error::{FileError, FileErrorKind};
use super::Workspace;
use crate::patch::{apply_hunks, Change, FilePatch, Format, Hunk, Patch, TextFile, MATCH_BUDGET};

/// The most a patch reads of the workspace, all its files together.
pub const MAX_PATCH_READ_BYTES: u64 = 64 * 1024 * 1024;

/// One patch at a time: two patches of the same files must not interleave their commits.
static PATCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchAction {
    Added,
    Updated,
    Deleted,
    Moved,
}

/// What the patch did to one file (one part of the patch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchedFile {
    pub path: String,
    pub action: PatchAction,
    /// Where a moved file went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The hunks applied.
    pub hunks: usize,
    pub lines_added: usize,
    pub lines_removed: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchOutcome {
    pub files: Vec<PatchedFile>,
}

/// What the patch makes of one file, so far.
#[derive(Debug)]
enum Now {
    /// As on disk.
    Unchanged,
    Gone,
    Written {
        data: Vec<u8>,
        /// The permission bits; `None` for a new file's default.
        mode: Option<u32>,
        executable: Option<bool>,
    },
}

#[derive(Debug)]
struct Slot {
    target: Target,
    now: Now,
}

impl Slot {
    fn exists(&self) -> bool {
        match self.now {
            Now::Unchanged => self.target.found.is_some(),
            Now::Gone => false,
            Now::Written { .. } => true,
        }
    }

    fn mode(&self) -> Option<u32> {
        match &self.now {
            Now::Written { mode, .. } => *mode,
            _ => self.target.found.map(|f| f.permissions()),
        }
    }
}

/// The files of one patch and what it makes of each.
struct Plan<'w> {
    ws: &'w Workspace,
    slots: Vec<Slot>,
    index: HashMap<TargetKey, usize>,
    read: u64,
    budget: u64,
    /// An envelope's `Add File` and `Move to` replace an existing file, as codex does; a unified
    /// diff's new file and rename must not, as `git apply` does.
    replaces: bool,
}

impl Plan<'_> {
    /// The slot of `path`'s file, located the first time the patch names it.
    fn slot(&mut self, path: &str, follow: bool) -> Result<usize, FileError> {
        let target = self.ws.locate(path, follow)?;
        let key = target.key()?;
        if let Some(&at) = self.index.get(&key) {
            return Ok(at);
        }
        match target.found {
            Some(f) if f.is_dir() => {
                return Err(FileError::conflict(format!(
                    "cannot patch '{}': it is a directory",
                    target.display
                )))
            }
            // A deletion removes a symlink itself; nothing else but a regular file is patched.
            Some(f) if !(f.is_regular() || (!follow && f.is_symlink())) => {
                return Err(FileError::invalid(format!(
                    "cannot patch '{}': it is not a regular file",
                    target.display
                )))
            }
            _ => {}
        }
        self.slots.push(Slot {
            target,
            now: Now::Unchanged,
        });
        self.index.insert(key, self.slots.len() - 1);
        Ok(self.slots.len() - 1)
    }

    /// The file's content as the patch has it so far.
    fn data(&mut self, at: usize, action: &str) -> Result<Vec<u8>, FileError> {
        let slot = &self.slots[at];
        match &slot.now {
            Now::Written { data, .. } => Ok(data.clone()),
            Now::Gone => Err(no_such_file(action, &slot.target.display)),
            Now::Unchanged => {
                let left = MAX_PATCH_READ_BYTES.saturating_sub(self.read);
                let data = slot.target.read(action, MAX_EDIT_BYTES.min(left))?;
                self.read += data.len() as u64;
                Ok(data)
            }
        }
    }

    /// The file's text, as the patch has it so far.
    fn text(&mut self, at: usize, action: &str) -> Result<TextFile, FileError> {
        let data = self.data(at, action)?;
        let display = &self.slots[at].target.display;
        let text = String::from_utf8(data).map_err(|_| {
            FileError::invalid(format!("cannot {action} '{display}': it is not UTF-8 text"))
        })?;
        Ok(TextFile::parse(&text))
    }

    /// `hunks` applied to the file's text; a failure names the hunk and why.
    fn apply(&mut self, at: usize, file: &FilePatch) -> Result<TextFile, FileError> {
        let text = self.text(at, "patch")?;
        let hunks = file.hunks();
        apply_hunks(&text, hunks, &mut self.budget).map_err(|failure| {
            let hunk = &hunks[failure.index];
            let kind = if failure.exhausted {
                FileErrorKind::Limit
            } else {
                FileErrorKind::Conflict
            };
            FileError::new(
                kind,
                format!(
                    "'{}': hunk {} of {} ({}, patch line {}) did not apply: {}",
                    self.slots[at].target.display,
                    failure.index + 1,
                    hunks.len(),
                    header(hunk),
                    hunk.patch_line,
                    failure.reason
                ),
            )
        })
    }

    fn part(&mut self, file: &FilePatch) -> Result<PatchedFile, FileError> {
        let hunks = file.hunks();
        let added = hunks.iter().map(Hunk::added).sum();
        let removed = hunks.iter().map(Hunk::removed).sum();
        match &file.change {
            Change::Add {
                lines,
                final_newline,
                executable,
            } => {
                let at = self.slot(&file.path, true)?;
                let mut outcome = PatchedFile {
                    path: self.slots[at].target.normal.clone(),
                    action: PatchAction::Added,
                    to: None,
                    hunks: 0,
                    lines_added: lines.len(),
                    lines_removed: 0,
                };
                if self.slots[at].exists() {
                    if !self.replaces {
                        return Err(FileError::conflict(format!(
                            "cannot add '{}': it already exists (a diff's new file must be \
                             new; change an existing one with hunks)",
                            self.slots[at].target.display
                        )));
                    }
                    outcome.action = PatchAction::Updated;
                    outcome.lines_removed = self.text(at, "replace")?.line_count();
                }
                let mode = self.slots[at].mode();
                self.slots[at].now = Now::Written {
                    data: TextFile::from_lines(lines, *final_newline)
                        .render()
                        .into_bytes(),
                    mode,
                    executable: executable.then_some(true),
                };
                Ok(outcome)
            }
            Change::Delete { hunks } => {
                let at = self.slot(&file.path, false)?;
                if !self.slots[at].exists() {
                    return Err(no_such_file("delete", &self.slots[at].target.display));
                }
                if !hunks.is_empty() {
                    let left = self.apply(at, file)?;
                    if left.line_count() > 0 {
                        return Err(FileError::conflict(format!(
                            "cannot delete '{}': it holds {} more lines than the deletion lists",
                            self.slots[at].target.display,
                            left.line_count()
                        )));
                    }
                }
                self.slots[at].now = Now::Gone;
                Ok(PatchedFile {
                    path: self.slots[at].target.normal.clone(),
                    action: PatchAction::Deleted,
                    to: None,
                    hunks: hunks.len(),
                    lines_added: 0,
                    lines_removed: removed,
                })
            }
            Change::Update {
                hunks,
                move_to,
                executable,
            } => {
                let at = self.slot(&file.path, true)?;
                if !self.slots[at].exists() {
                    return Err(no_such_file("update", &self.slots[at].target.display));
                }
                let data = if hunks.is_empty() {
                    self.data(at, "move")?
                } else {
                    self.apply(at, file)?.render().into_bytes()
                };
                let mode = self.slots[at].mode();
                let mut outcome = PatchedFile {
                    path: self.slots[at].target.normal.clone(),
                    action: PatchAction::Updated,
                    to: None,
                    hunks: hunks.len(),
                    lines_added: added,
                    lines_removed: removed,
                };
                let mut into = at;
                if let Some(to) = move_to {
                    let dest = self.slot(to, true)?;
                    if dest != at {
                        if self.slots[dest].exists() && !self.replaces {
                            return Err(FileError::conflict(format!(
                                "cannot move '{}' to '{}': it already exists",
                                self.slots[at].target.display, self.slots[dest].target.display
                            )));
                        }
                        self.slots[at].now = Now::Gone;
                        outcome.action = PatchAction::Moved;
                        outcome.to = Some(self.slots[dest].target.normal.clone());
                        into = dest;
                    }
                }
                self.slots[into].now = Now::Written {
                    data,
                    mode,
                    executable: *executable,
                };
                Ok(outcome)
            }
        }
    }

    /// The change set: every file whose content or presence the patch changes.
    fn steps(self) -> Vec<Step> {
        self.slots
            .into_iter()
            .filter_map(|slot| match slot.now {
                Now::Unchanged => None,
                Now::Gone if slot.target.found.is_none() => None,
                Now::Gone => Some(Step::Remove {
                    target: slot.target,
                }),
                Now::Written {
                    data,
                    mode,
                    executable,
                } => Some(Step::Write {
                    target: slot.target,
                    data,
                    mode,
                    executable,
                }),
            })
            .collect()
    }
}

fn no_such_file(action: &str, display: &str) -> FileError {
    FileError::not_found(format!("cannot {action} '{display}': no such file"))
}

/// A hunk's header for messages.
fn header(hunk: &Hunk) -> String {
    if hunk.header.is_empty() {
        "no '@@' line".to_owned()
    } else {
        format!("'{}'", hunk.header)
    }
}

impl Workspace {
    /// Applies `patch` (its paths checked, relative to the root or absolute under it) all or
    /// nothing; answers what it did to each file, in the patch's order.
    pub fn patch(&self, patch: &Patch) -> Result<PatchOutcome, FileError> {
        let _one_at_a_time = PATCHING.lock().unwrap_or_else(|e| e.into_inner());
        let mut plan = Plan {
            ws: self,
            slots: Vec::new(),
            index: HashMap::new(),
            read: 0,
            budget: MATCH_BUDGET,
            replaces: patch.format == Format::ApplyPatch,
        };
        let mut files = Vec::with_capacity(patch.files.len());
        for file in &patch.files {
            files.push(plan.part(file).map_err(nothing_changed)?);
        }
        commit(plan.steps()).map_err(|e| {
            if e.kind == FileErrorKind::Io && e.message.contains("undoing") {
                e
            } else {
                nothing_changed(e)
            }
        })?;
        Ok(PatchOutcome { files })
    }
}

fn nothing_changed(e: FileError) -> FileError {
    FileError::new(e.kind, format!("{}; nothing was changed", e.message))
}

#[cfg(test)]
mod tests {
    use super::super::tests::Sandbox;
    use super::*;

    fn patch(text: &str) -> Patch {
        Patch::parse(text, None).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every name under the root, sorted (temporary files included).
    fn names(sb: &Sandbox) -> Vec<String> {
        fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                out.push(path.strip_prefix(base).unwrap().display().to_string());
                if path.is_dir() && !path.is_symlink() {
                    walk(&path, base, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&sb.root(), &sb.root(), &mut out);
        out.sort();
        out
    }

    #[test]
    fn an_envelope_adds_updates_moves_and_deletes() {
        let sb = Sandbox::new("patch-envelope");
        sb.file("a.py", "def f():\n    return 1\n\ndef g():\n    return 2\n");
        sb.file("old/b.txt", "one\ntwo\n");
        sb.file("gone.txt", "bye\n");
        let out = sb
            .ws()
            .patch(&patch(
                "*** Begin Patch\n*** Add File: new/c.txt\n+hello\n*** Update File: a.py\n\
                 @@ def f():\n-    return 1\n+    return 10\n@@ def g():\n-    return 2\n\
                 +    return 20\n*** Update File: old/b.txt\n*** Move to: moved/b.txt\n@@\n one\n\
                 -two\n+2\n*** Delete File: gone.txt\n*** End Patch",
            ))
            .unwrap();
        assert_eq!(sb.read("new/c.txt"), "hello\n");
        assert_eq!(
            sb.read("a.py"),
            "def f():\n    return 10\n\ndef g():\n    return 20\n"
        );
        assert_eq!(sb.read("moved/b.txt"), "one\n2\n");
        assert!(!sb.at("old/b.txt").exists() && !sb.at("gone.txt").exists());
        let actions: Vec<_> = out
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.action))
            .collect();
        assert_eq!(
            actions,
            [
                ("new/c.txt", PatchAction::Added),
                ("a.py", PatchAction::Updated),
                ("old/b.txt", PatchAction::Moved),
                ("gone.txt", PatchAction::Deleted),
            ]
        );
        assert_eq!(out.files[2].to.as_deref(), Some("moved/b.txt"));
        assert_eq!(
            (
                out.files[1].hunks,
                out.files[1].lines_added,
                out.files[1].lines_removed
            ),
            (2, 2, 2)
        );
        assert_eq!(
            names(&sb),
            ["a.py", "moved", "moved/b.txt", "new", "new/c.txt", "old"]
        );
    }

    #[test]
    fn a_hunk_that_does_not_apply_changes_nothing_anywhere() {
        let sb = Sandbox::new("patch-atomic");
        sb.file("a.txt", "a1\na2\n");
        sb.file("b.txt", "b1\nb2\nb3\n");
        sb.file("d.txt", "keep\n");
        let before = names(&sb);
        let err = sb
            .ws()
            .patch(&patch(
                "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n a1\n-a2\n+A2\n\
                 --- /dev/null\n+++ b/n/new.txt\n@@ -0,0 +1 @@\n+new\n\
                 --- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-keep\n\
                 --- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n-b1\n+B1\n b2\n@@ -3 +3 @@\n-bX\n+B3\n",
            ))
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
        assert!(
            err.message.starts_with(
                "'b.txt': hunk 2 of 2 ('@@ -3 +3 @@', patch line 21) did not apply: context not \
                 found"
            ),
            "{err}"
        );
        assert!(err.message.ends_with("; nothing was changed"), "{err}");
        assert_eq!(sb.read("a.txt"), "a1\na2\n");
        assert_eq!(sb.read("b.txt"), "b1\nb2\nb3\n");
        assert_eq!(sb.read("d.txt"), "keep\n");
        assert_eq!(names(&sb), before);
    }

    #[test]
    fn a_file_changed_after_it_was_read_is_not_overwritten() {
        let sb = Sandbox::new("patch-changed");
        sb.file("a.txt", "a\n");
        let ws = sb.ws();
        let p = patch("*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n*** End Patch");
        let mut plan = Plan {
            ws: &ws,
            slots: Vec::new(),
            index: HashMap::new(),
            read: 0,
            budget: MATCH_BUDGET,
            replaces: true,
        };
        plan.part(&p.files[0]).unwrap();
        let steps = plan.steps();
        std::fs::write(sb.at("a.txt"), "edited meanwhile\n").unwrap();
        let err = commit(steps).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
        assert_eq!(sb.read("a.txt"), "edited meanwhile\n");
        assert_eq!(names(&sb), ["a.txt"]);
    }

    #[test]
    fn later_parts_see_what_earlier_ones_made() {
        let sb = Sandbox::new("patch-sequence");
        sb.file("a.txt", "1\n");
        sb.symlink("a.txt", "link");
        let out = sb
            .ws()
            .patch(&patch(
                "*** Begin Patch\n*** Update File: a.txt\n@@\n-1\n+2\n*** Update File: link\n\
                 @@\n-2\n+3\n*** Delete File: b.txt\n*** Add File: b.txt\n+b\n\
                 *** Delete File: b.txt\n*** End Patch",
            ))
            .unwrap_err();
        // b.txt does not exist: the first delete fails, and nothing changed.
        assert_eq!(out.kind, FileErrorKind::NotFound);
        assert_eq!(sb.read("a.txt"), "1\n");
        let out = sb
            .ws()
            .patch(&patch(
                "*** Begin Patch\n*** Update File: a.txt\n@@\n-1\n+2\n*** Update File: link\n\
                 @@\n-2\n+3\n*** Add File: b.txt\n+b\n*** Delete File: b.txt\n*** End Patch",
            ))
            .unwrap();
        assert_eq!(out.files.len(), 4);
        // The symlink was followed to its target (one file, updated twice); it stays a link.
        assert_eq!(sb.read("a.txt"), "3\n");
        assert!(sb.at("link").is_symlink());
        assert!(!sb.at("b.txt").exists());
    }

    #[test]
    fn paths_through_symlinks_out_of_the_root_are_refused() {
        let sb = Sandbox::new("patch-escape");
        sb.symlink(sb.outside(), "out");
        sb.symlink(sb.outside().join("secret.txt"), "secret");
        sb.symlink("../outside/secret.txt", "up");
        for ws in sb.workspaces() {
            for text in [
                "*** Begin Patch\n*** Add File: out/x.txt\n+x\n*** End Patch",
                "*** Begin Patch\n*** Update File: out/secret.txt\n@@\n-SECRET\n+x\n*** End Patch",
                "*** Begin Patch\n*** Update File: secret\n@@\n-SECRET\n+x\n*** End Patch",
                "*** Begin Patch\n*** Update File: up\n@@\n-SECRET\n+x\n*** End Patch",
                "*** Begin Patch\n*** Add File: a\n+a\n*** Update File: a\n*** Move to: out/a\n*** End Patch",
            ] {
                let err = ws.patch(&patch(text)).unwrap_err();
                assert_eq!(err.kind, FileErrorKind::Permission, "{text}: {err}");
            }
        }
        sb.assert_outside_untouched();
        assert_eq!(names(&sb), ["out", "secret", "up"]);
    }

    #[test]
    fn a_diff_keeps_modes_sets_the_executable_bit_and_refuses_to_clobber() {
        use std::os::unix::fs::PermissionsExt;
        let sb = Sandbox::new("patch-modes");
        sb.file("run.sh", "echo a\n");
        std::fs::set_permissions(sb.at("run.sh"), std::fs::Permissions::from_mode(0o640)).unwrap();
        let ws = sb.ws();
        ws.patch(&patch(
            "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n--- a/run.sh\n\
             +++ b/run.sh\n@@ -1 +1 @@\n-echo a\n+echo b\n",
        ))
        .unwrap();
        let mode = |p: &str| std::fs::metadata(sb.at(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("run.sh"), 0o750);
        assert_eq!(sb.read("run.sh"), "echo b\n");
        let err = ws
            .patch(&patch("--- /dev/null\n+++ b/run.sh\n@@ -0,0 +1 @@\n+x\n"))
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict, "{err}");
        // An envelope's Add File replaces it, as codex does, and says it did.
        let out = ws
            .patch(&patch(
                "*** Begin Patch\n*** Add File: run.sh\n+x\n*** End Patch",
            ))
            .unwrap();
        assert_eq!(
            (out.files[0].action, out.files[0].lines_removed),
            (PatchAction::Updated, 1)
        );
        assert_eq!(mode("run.sh"), 0o750);
    }

    #[test]
    fn a_deletion_that_does_not_list_the_whole_file_is_refused() {
        let sb = Sandbox::new("patch-delete");
        sb.file("d.txt", "a\nb\n");
        let err = sb
            .ws()
            .patch(&patch("--- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"))
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
        assert!(err.message.contains("1 more lines"), "{err}");
        assert_eq!(sb.read("d.txt"), "a\nb\n");
    }

    #[test]
    fn binary_and_directories_are_refused() {
        let sb = Sandbox::new("patch-binary");
        std::fs::write(sb.at("bin"), [0xff, 0xfe, 0x00]).unwrap();
        sb.dir("d");
        let fifo = std::ffi::CString::new(sb.at("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let ws = sb.ws();
        for text in [
            "*** Begin Patch\n*** Add File: fifo\n+x\n*** End Patch",
            "*** Begin Patch\n*** Delete File: fifo\n*** End Patch",
        ] {
            let err = ws.patch(&patch(text)).unwrap_err();
            assert_eq!(err.kind, FileErrorKind::InvalidArgument, "{err}");
            assert!(err.message.contains("not a regular file"), "{err}");
        }
        let err = ws
            .patch(&patch(
                "*** Begin Patch\n*** Update File: bin\n@@\n-x\n+y\n*** End Patch",
            ))
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::InvalidArgument);
        assert!(err.message.contains("not UTF-8 text"), "{err}");
        let err = ws
            .patch(&patch("*** Begin Patch\n*** Delete File: d\n*** End Patch"))
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Conflict);
        // A binary file may still be moved or deleted whole.
        ws.patch(&patch(
            "*** Begin Patch\n*** Update File: bin\n*** Move to: bin2\n*** End Patch",
        ))
        .unwrap();
        assert_eq!(std::fs::read(sb.at("bin2")).unwrap(), [0xff, 0xfe, 0x00]);
    }
}

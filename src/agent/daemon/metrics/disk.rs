//! The disk under the workspace root: the size of the file system that holds it, what is used
//! and what an unprivileged writer may still use (what `df /workspace` says), read through the
//! root's own descriptor, opened once: no path is resolved again at each sample.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DiskReading {
    pub(crate) total_bytes: u64,
    pub(crate) used_bytes: u64,
    pub(crate) free_bytes: u64,
}

pub(crate) struct Disk {
    root: File,
}

impl Disk {
    pub(crate) fn open(root: &Path) -> io::Result<Self> {
        Ok(Self {
            root: File::open(root)?,
        })
    }

    pub(crate) fn read(&self) -> io::Result<DiskReading> {
        // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a writable statvfs the kernel fills in; the fd is open for `self`'s life.
        let rc = unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut st) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let block = st.f_frsize;
        let blocks = |n: u64| n.saturating_mul(block);
        Ok(DiskReading {
            total_bytes: blocks(st.f_blocks),
            used_bytes: blocks(st.f_blocks.saturating_sub(st.f_bfree)),
            free_bytes: blocks(st.f_bavail),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_system_of_a_directory_has_a_size_and_what_it_uses_fits_in_it() {
        let disk = Disk::open(&std::env::temp_dir()).unwrap();
        let got = disk.read().unwrap();
        assert!(got.total_bytes > 0);
        assert!(got.used_bytes <= got.total_bytes && got.free_bytes <= got.total_bytes);
    }
}

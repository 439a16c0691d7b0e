//! One exec as the registry holds it (its record and its stdin queue), and the table of them
//! that the registry shares with its pruner.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::io::InputJob;
use super::record::ExecRecord;

pub(super) struct Entry {
    pub(super) record: Arc<ExecRecord>,
    /// Stdin jobs of this exec, written by one task in order; `None` when it never ran here.
    pub(super) input: Option<mpsc::UnboundedSender<InputJob>>,
}

/// The registry's execs by id: the registry adds them, the pruner (see `prune`) removes them.
pub(super) type Entries = Arc<Mutex<HashMap<String, Entry>>>;

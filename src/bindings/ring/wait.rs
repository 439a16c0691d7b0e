//! What `EventRing.wait_async` needs from Rust, none of which calls Python: an event loop's
//! doorbell, and the watch that rings it once a ring is ready. The futures, the timer and the
//! loop's reader live in Python (`ring.py`).
//!
//! Why nothing here calls Python: a thread that waits for the GIL while the interpreter
//! finalizes is made to exit (`pthread_exit`, before Python 3.14) as soon as it gets it. With
//! extension frames on its stack (a Rust thread that attached to wake a loop, or a loop's thread
//! running Python code that the extension called) that exit unwinds through them and the process
//! aborts ("FATAL: exception not rethrown"). A doorbell needs no GIL, and the loop's thread
//! resolves its futures from Python frames only.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::ring::{Doorbell, EventRing, WaiterId};

/// An event loop's doorbell, rung by the appends that make a watched ring ready.
#[pyclass(frozen, name = "_LoopBell", module = "modal_workspace_core._core")]
pub struct PyLoopBell {
    bell: Arc<Doorbell>,
}

#[pymethods]
impl PyLoopBell {
    #[new]
    fn new() -> PyResult<Self> {
        Ok(Self {
            bell: Arc::new(Doorbell::new()?),
        })
    }

    /// The pipe the loop watches; open while this object (or a watch that rings it) lives.
    fn fileno(&self) -> i32 {
        self.bell.fd()
    }

    /// The tokens rung since the last call; call it after reading the pipe.
    fn take(&self) -> Vec<u64> {
        self.bell.take()
    }
}

/// A registered wait on a ring; `cancel` takes it back (a ring already under way may land).
#[pyclass(frozen, name = "_RingWatch", module = "modal_workspace_core._core")]
pub struct PyRingWatch {
    ring: Arc<EventRing>,
    id: WaiterId,
}

#[pymethods]
impl PyRingWatch {
    fn cancel(&self) {
        self.ring.forget_waiter(self.id);
    }
}

/// Rings `bell` with `token` once an event after `cursor` exists or the ring closes; `None`
/// when that is already so (nothing is registered then).
pub(super) fn watch(
    ring: &Arc<EventRing>,
    cursor: u64,
    bell: &PyLoopBell,
    token: u64,
) -> Option<PyRingWatch> {
    let bell = Arc::clone(&bell.bell);
    let id = ring.on_ready(cursor, Box::new(move || bell.ring(token)))?;
    Some(PyRingWatch {
        ring: Arc::clone(ring),
        id,
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLoopBell>()?;
    m.add_class::<PyRingWatch>()?;
    Ok(())
}

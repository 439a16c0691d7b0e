//! `EventRing.wait_async` for asyncio: a future of the running loop, resolved by the append that
//! makes the ring ready — directly on the loop's own thread, else by `call_soon_threadsafe`.
//!
//! No runtime thread and no poll: the ring runs a callback after the append that makes it ready
//! (see `EventRing::on_ready`); a timer of the loop ends the wait at its timeout, and a done
//! callback of the future takes the ring's callback and the timer back however the wait ends
//! (woken, timed out or cancelled).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::ring::{EventRing, WaiterId};

/// Wake-ups that other threads began and have not finished, and whether the interpreter is
/// exiting: past the exit hook no thread may start to take the GIL, because a thread that
/// takes it while the interpreter finalizes is stopped dead (and a Rust thread then aborts).
static WAKES_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// Starts a wait for an event after `cursor` (or the ring's end), as a future of the running
/// event loop that resolves to true, or to whether the ring is ready when `timeout` passes.
pub(super) fn wait_async<'py>(
    py: Python<'py>,
    ring: &Arc<EventRing>,
    cursor: u64,
    timeout: Duration,
) -> PyResult<Bound<'py, PyAny>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get_running_loop = GET_RUNNING_LOOP.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
    })?;
    let event_loop = get_running_loop.bind(py).call0()?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    if timeout.is_zero() {
        let ready = ring.wait(cursor, Duration::ZERO);
        future.call_method1(intern!(py, "set_result"), (ready,))?;
        return Ok(future);
    }
    let waker = Waker {
        event_loop: event_loop.clone().unbind(),
        future: future.clone().unbind(),
        loop_thread: thread::current().id(),
    };
    let Some(id) = ring.on_ready(cursor, Box::new(move || waker.wake())) else {
        future.call_method1(intern!(py, "set_result"), (true,))?;
        return Ok(future);
    };
    let on_timeout = Timeout {
        ring: Arc::clone(ring),
        cursor,
        future: future.clone().unbind(),
    };
    let timer = event_loop.call_method1(
        intern!(py, "call_later"),
        (timeout.as_secs_f64(), on_timeout),
    )?;
    let cleanup = Cleanup {
        ring: Arc::clone(ring),
        id,
        timer: timer.unbind(),
    };
    future.call_method1(intern!(py, "add_done_callback"), (cleanup,))?;
    Ok(future)
}

/// What the ring calls once it is ready: resolves the future, or has its loop resolve it.
struct Waker {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
    /// The thread that runs the loop (the one that called `wait_async`).
    loop_thread: ThreadId,
}

impl Waker {
    fn wake(self) {
        if thread::current().id() == self.loop_thread {
            // The loop's own thread is appending, from code the loop runs: it holds the GIL (or
            // gave it up for a large append and takes it back here) and nothing else touches
            // the future now, so it is resolved at once, without a trip through the loop.
            Python::attach(|py| resolve(self.future.bind(py), true));
            return;
        }
        // Counted before the check, so the exit hook either sees this wake-up and waits for it,
        // or this wake-up sees the hook's flag and stays away from the interpreter.
        WAKES_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        if !EXITING.load(Ordering::SeqCst) {
            Python::attach(|py| {
                let resolve = Resolve {
                    future: self.future.clone_ref(py),
                };
                // Fails only when the loop is closed: then no one awaits the future any more.
                let _ = self
                    .event_loop
                    .bind(py)
                    .call_method1(intern!(py, "call_soon_threadsafe"), (resolve,));
                drop(self);
            });
        }
        WAKES_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sets the result of a future that is still pending; one cancelled, timed out or already woken
/// keeps its state.
fn resolve(future: &Bound<'_, PyAny>, ready: bool) {
    let py = future.py();
    let pending = future
        .call_method0(intern!(py, "done"))
        .and_then(|done| done.is_truthy())
        .is_ok_and(|done| !done);
    if pending {
        // Cannot fail on a pending future of a loop that is running this code.
        let _ = future.call_method1(intern!(py, "set_result"), (ready,));
    }
}

/// Resolves the future on its loop's thread (scheduled by `call_soon_threadsafe`).
#[pyclass(frozen)]
struct Resolve {
    future: Py<PyAny>,
}

#[pymethods]
impl Resolve {
    fn __call__(&self, py: Python<'_>) {
        resolve(self.future.bind(py), true);
    }
}

/// Ends the wait at its timeout with whether the ring is ready by then (as `wait` does).
#[pyclass(frozen)]
struct Timeout {
    ring: Arc<EventRing>,
    cursor: u64,
    future: Py<PyAny>,
}

#[pymethods]
impl Timeout {
    fn __call__(&self, py: Python<'_>) {
        let ready = self.ring.wait(self.cursor, Duration::ZERO);
        resolve(self.future.bind(py), ready);
    }
}

/// Runs when the future is done, however it got there: takes back the ring's callback (which
/// drops its references to the loop and the future) and cancels the timer.
#[pyclass(frozen)]
struct Cleanup {
    ring: Arc<EventRing>,
    id: WaiterId,
    timer: Py<PyAny>,
}

#[pymethods]
impl Cleanup {
    fn __call__(&self, py: Python<'_>, _future: &Bound<'_, PyAny>) -> PyResult<()> {
        self.ring.forget_waiter(self.id);
        self.timer.bind(py).call_method0(intern!(py, "cancel"))?;
        Ok(())
    }
}

/// Stops wake-ups from other threads from entering the interpreter, then waits (GIL released,
/// at most `timeout` seconds) for those already inside. Registered with `atexit` by the package.
#[pyfunction]
pub(super) fn _drain_async_runtime(py: Python<'_>, timeout: f64) {
    EXITING.store(true, Ordering::SeqCst);
    if WAKES_IN_FLIGHT.load(Ordering::SeqCst) == 0 {
        return;
    }
    let timeout = Duration::from_secs_f64(timeout.clamp(0.0, 10.0));
    py.detach(|| {
        let deadline = Instant::now() + timeout;
        while WAKES_IN_FLIGHT.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
    });
}

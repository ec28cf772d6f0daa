//! `await acollect()`: a request queued to the collector's worker thread, awaited through a
//! small awaitable (`Collecting`) instead of an asyncio future made per call.
//!
//! The worker collects with no GIL held and stores the result in the request's slot. The event
//! loop's thread builds the Python objects when it resumes. If the result is already there when
//! the awaiting task first asks, the await completes without yielding to the loop. Otherwise the
//! awaitable yields an asyncio future of the running loop, as `asyncio.Future.__await__` does,
//! and the loop sleeps in its selector (it never spins) until the worker wakes it through the
//! loop's `LoopWaker`, an eventfd the loop watches (`loop.add_reader`).
//!
//! The worker never takes the GIL. Waking the loop with `loop.call_soon_threadsafe` would need it,
//! and the socket write inside that call releases it again: the loop's thread, just woken, takes
//! it, and the worker must then wait for the loop to go idle before it can finish the call and
//! start the next request (one more thread wake-up per await). A worker outside the interpreter
//! also cannot be caught taking the GIL while the interpreter finalises.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use nix::errno::Errno;
use nix::sys::eventfd::{EfdFlags, EventFd};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use std::os::fd::{AsRawFd, RawFd};

use super::{inherited_error, Collected, Series};
use crate::objects::schema;

/// Locks a mutex whose data stays consistent even if a holder panicked (every critical
/// section here is a few field moves): a poisoned lock must not leave an await hanging.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The future a waiting await yielded, and the waker of its loop.
struct Waiter {
    waker: Arc<WakerShared>,
    future: Py<PyAny>,
}

/// One event loop's wake-up channel, shared by every collector awaited on that loop.
pub(crate) struct WakerShared {
    eventfd: EventFd,
    /// Futures whose results are ready, to complete on the loop's thread.
    ready: Mutex<Vec<Py<PyAny>>>,
}

impl WakerShared {
    /// Hands `future` to the loop and wakes it (any thread, no GIL).
    fn wake(&self, future: Py<PyAny>) {
        lock(&self.ready).push(future);
        // Fails only if the counter would overflow (2^64 - 1 unread wake-ups): the loop is
        // readable then anyway.
        let _ = self.eventfd.write(1);
    }
}

/// An event loop's wake-up channel: `relay_metrics.resource_metrics` registers `drain` for
/// `fileno()` with `loop.add_reader` once per loop, and keeps it for the loop's lifetime.
#[pyclass(frozen, module = "relay_metrics._native")]
pub(crate) struct LoopWaker {
    shared: Arc<WakerShared>,
}

#[pymethods]
impl LoopWaker {
    #[new]
    fn new() -> PyResult<Self> {
        let eventfd =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(|error| {
                    PyOSError::new_err(format!("cannot create an eventfd: {error}"))
                })?;
        Ok(Self {
            shared: Arc::new(WakerShared {
                eventfd,
                ready: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The eventfd the loop watches.
    fn fileno(&self) -> RawFd {
        self.shared.eventfd.as_raw_fd()
    }

    /// Completes (with `None`) the futures whose results are ready, unless they were cancelled;
    /// the awaits that yielded them then take their results. Runs on the loop's thread.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        match self.shared.eventfd.read() {
            // EAGAIN: a wake-up already drained with the futures of an earlier one.
            Ok(_) | Err(Errno::EAGAIN) => {}
            Err(error) => return Err(PyOSError::new_err(format!("eventfd read: {error}"))),
        }
        let ready = std::mem::take(&mut *lock(&self.shared.ready));
        // Every future is completed even if one fails, so that no other await is left hanging.
        let mut first_error = None;
        for future in ready {
            if let Err(error) = complete(future.bind(py)) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

enum SlotState {
    /// Queued or being collected; the waiter once the await had to yield.
    Waiting(Option<Waiter>),
    Ready(Result<Collected, String>),
    /// The await has taken the result.
    Consumed,
}

/// Completes an asyncio future with `None`, unless its await was cancelled meanwhile.
fn complete(future: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = future.py();
    if !future
        .call_method0(pyo3::intern!(py, "done"))?
        .is_truthy()?
    {
        future.call_method1(pyo3::intern!(py, "set_result"), (py.None(),))?;
    }
    Ok(())
}

/// One request's result, shared by the worker and the awaitable.
pub(super) struct Slot {
    state: Mutex<SlotState>,
}

impl Slot {
    fn new(state: SlotState) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(state),
        })
    }

    /// Stores the result (worker thread, no GIL) and wakes the await if it is waiting.
    fn complete(&self, result: Result<Collected, String>) {
        let waiter = match std::mem::replace(&mut *lock(&self.state), SlotState::Ready(result)) {
            SlotState::Waiting(waiter) => waiter,
            // Completed once only: nothing else stores a result.
            SlotState::Ready(_) | SlotState::Consumed => None,
        };
        if let Some(waiter) = waiter {
            waiter.waker.wake(waiter.future);
        }
    }
}

/// The requests of one collector and its worker's state.
pub(super) struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

struct QueueState {
    jobs: VecDeque<Arc<Slot>>,
    running: bool,
    parked: bool,
    closed: bool,
}

impl Queue {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(QueueState {
                jobs: VecDeque::new(),
                running: false,
                parked: false,
                closed: false,
            }),
            wake: Condvar::new(),
        }
    }

    /// Queues a collection, starting the worker if none runs; the awaitable of its result.
    pub(super) fn submit(self: &Arc<Self>, series: &Arc<Series>, owner_pid: u32) -> Collecting {
        let slot = Slot::new(SlotState::Waiting(None));
        let mut state = lock(&self.state);
        if state.closed {
            *lock(&slot.state) = SlotState::Ready(Err("this collector is closed".to_owned()));
            return Collecting { slot, owner_pid };
        }
        state.jobs.push_back(Arc::clone(&slot));
        if !state.running {
            let queue = Arc::clone(self);
            let series = Arc::clone(series);
            let started = std::thread::Builder::new()
                .name("relay-metrics-collect".into())
                .spawn(move || work(&series, &queue));
            match started {
                Ok(_) => state.running = true,
                Err(error) => {
                    state.jobs.pop_back();
                    *lock(&slot.state) = SlotState::Ready(Err(format!(
                        "cannot start the collector thread: {error}"
                    )));
                }
            }
        } else if state.parked {
            self.wake.notify_one();
        }
        Collecting { slot, owner_pid }
    }

    /// Lets the worker end once the requests already queued are done; later requests fail.
    pub(super) fn close(&self) {
        lock(&self.state).closed = true;
        self.wake.notify_all();
    }

    /// The next request, waiting for one; `None` once closed and empty.
    fn next(&self) -> Option<Arc<Slot>> {
        let mut state = lock(&self.state);
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Some(job);
            }
            if state.closed {
                state.running = false;
                return None;
            }
            state.parked = true;
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.parked = false;
        }
    }
}

/// The worker thread: one collection per request, in order.
fn work(series: &Series, queue: &Queue) {
    while let Some(slot) = queue.next() {
        slot.complete(series.collect(None));
    }
}

/// The awaitable returned by `NativeCollector.acollect()`: awaited once, it gives the snapshot.
#[pyclass(frozen, module = "relay_metrics._native")]
pub(crate) struct Collecting {
    slot: Arc<Slot>,
    owner_pid: u32,
}

impl Collecting {
    /// An awaitable that fails at once with `message`.
    pub(super) fn failed(message: String, owner_pid: u32) -> Self {
        Self {
            slot: Slot::new(SlotState::Ready(Err(message))),
            owner_pid,
        }
    }

    /// Ends the await: `StopIteration(snapshot)`, or the collection's error.
    fn finish(py: Python<'_>, result: Result<Collected, String>) -> PyErr {
        match result
            .map_err(PyRuntimeError::new_err)
            .and_then(|(snapshot, json)| schema(py)?.snapshot(py, &snapshot, &json))
        {
            Ok(value) => PyStopIteration::new_err((value.unbind(),)),
            Err(error) => error,
        }
    }

    fn take_ready(&self) -> Option<Result<Collected, String>> {
        let mut state = lock(&self.slot.state);
        match std::mem::replace(&mut *state, SlotState::Consumed) {
            SlotState::Ready(result) => Some(result),
            other => {
                *state = other;
                None
            }
        }
    }
}

#[pymethods]
impl Collecting {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Each step of the await: the snapshot when it is there, else a future to wait on.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if std::process::id() != self.owner_pid {
            // The worker stayed in the parent process: this request will never complete here.
            return Err(inherited_error(self.owner_pid));
        }
        if let Some(result) = self.take_ready() {
            return Err(Self::finish(py, result));
        }
        // A future of the running loop, marked as `asyncio.Future.__await__` marks the futures it
        // yields, and that loop's waker.
        let (future, waker): (Bound<'py, PyAny>, Bound<'py, LoopWaker>) =
            schema(py)?.wait_future.bind(py).call0()?.extract()?;
        let mut state = lock(&self.slot.state);
        match std::mem::replace(&mut *state, SlotState::Consumed) {
            SlotState::Ready(result) => {
                drop(state);
                Err(Self::finish(py, result))
            }
            SlotState::Waiting(_) => {
                *state = SlotState::Waiting(Some(Waiter {
                    waker: Arc::clone(&waker.get().shared),
                    future: future.clone().unbind(),
                }));
                Ok(future)
            }
            SlotState::Consumed => Err(PyRuntimeError::new_err(
                "cannot reuse an already awaited relay_metrics collection",
            )),
        }
    }
}

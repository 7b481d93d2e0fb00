// SPDX-License-Identifier: Apache-2.0
//! A Python batch procedure: the core forms the batches (`ucall_core::batch`) on threads
//! of its own, without the GIL; each batch takes the GIL once, binds every call's params
//! with the per-item plan, and makes one Python call of the whole batch.
//!
//! The Python side (`ucall._batch.Runner`) turns the bound rows into the function's
//! columns (lists, or numpy arrays stacked on axis 0), calls it, and hands back one value
//! per call (an `async def` function: a coroutine that does so). Here each value becomes
//! its caller's reply; an exception instance in the list answers that caller only.
//!
//! With middleware, each call's context is copied when it is queued, and the middleware
//! runs for each call of a batch before the function does (`ucall._batch.gate`): a call it
//! refuses is answered with its error and left out; the others go on in the batch.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use pyo3::exceptions::PyBaseException;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use ucall_core::{Batch, BatchHandler, Call, RpcError, RunHere};

use crate::context::{Context, Owned as CallContext};
use crate::params::Plan;
use crate::procedure::{is_awaitable, Hooks};

/// One batch procedure's Python side.
pub struct BatchRunner {
    name: Arc<str>,
    /// `runner(rows) -> list | awaitable of list`.
    runner: Py<PyAny>,
    /// Binds one call's params (the documented, per-item signature).
    plan: Plan,
    hooks: Arc<Hooks>,
    /// `gate(contexts) -> [None | exception]`: the middleware run for each call, when the
    /// server has middleware.
    gate: Option<Py<PyAny>>,
}

impl BatchRunner {
    pub fn new(name: &str, runner: Py<PyAny>, plan: Plan, hooks: Arc<Hooks>, gate: Option<Py<PyAny>>) -> Self {
        BatchRunner {
            name: Arc::from(name),
            runner,
            plan,
            hooks,
            gate,
        }
    }

    /// Run the middleware for each call of `batch`, answering those it refuses; `false`
    /// when none is left.
    fn admit(&self, py: Python<'_>, gate: &Py<PyAny>, batch: &mut Batch) -> bool {
        let contexts: PyResult<Vec<Bound<'_, Context>>> = (0..batch.len())
            .map(|index| {
                let owned = batch
                    .take_kept(index)
                    .and_then(|kept| kept.downcast::<CallContext>().ok())
                    .unwrap_or_else(|| CallContext::of(&batch.call(index), true, None));
                Bound::new(py, Context::new(owned, self.hooks.keyed_limits.clone()))
            })
            .collect();
        let outcomes = contexts
            .and_then(|contexts| PyList::new(py, contexts))
            .and_then(|contexts| gate.bind(py).call1((contexts,)))
            .and_then(|outcomes| outcomes.try_iter()?.collect::<PyResult<Vec<_>>>());
        let outcomes = match outcomes {
            Ok(outcomes) if outcomes.len() == batch.len() => outcomes,
            Ok(_) => {
                let error = RpcError::internal("Internal error: the middleware of a batch answered wrongly");
                batch.refuse((0..batch.len()).map(|index| (index, error.clone())).collect());
                return false;
            }
            Err(error) => {
                let error = self.hooks.error(py, &error, &self.name);
                batch.refuse((0..batch.len()).map(|index| (index, error.clone())).collect());
                return false;
            }
        };
        let refused = outcomes
            .into_iter()
            .enumerate()
            .filter(|(_, outcome)| !outcome.is_none())
            .map(|(index, exception)| (index, self.hooks.error(py, &PyErr::from_value(exception), &self.name)))
            .collect();
        batch.refuse(refused);
        !batch.is_empty()
    }
}

impl BatchHandler for BatchRunner {
    /// With middleware, the call's context (with its params), for the middleware's run.
    fn keep(&self, call: &Call<'_>, deadline: Option<Instant>) -> Option<Box<dyn Any + Send>> {
        self.gate.as_ref()?;
        let kept: Box<dyn Any + Send> = CallContext::of(call, true, deadline);
        Some(kept)
    }

    /// A lone call runs in the receiving lane's group after its turn: no switch to the
    /// batch thread and back, and the lane's monitor hands the lane over if it blocks.
    fn run_soon(&self, here: RunHere) -> Result<(), RunHere> {
        crate::runtime::collect_batch(here)
    }

    fn run(&self, mut batch: Batch) {
        Python::attach(|py| {
            if let Some(gate) = &self.gate {
                if !self.admit(py, gate, &mut batch) {
                    return;
                }
            }
            let mut rows = Vec::with_capacity(batch.len());
            let mut refused = Vec::new();
            for index in 0..batch.len() {
                // Attachments are bound as views of the section the queue kept (`lend`).
                let bound =
                    ucall_core::lend::shared(batch.section_at(index), || self.plan.bind(py, batch.params_at(index)));
                match bound {
                    Ok((args, _)) => rows.push(args),
                    Err(error) => refused.push((index, error)),
                }
            }
            batch.refuse(refused);
            if batch.is_empty() {
                return;
            }
            let called = PyList::new(py, rows).and_then(|rows| self.runner.bind(py).call1((rows,)));
            match called {
                Err(error) => batch.fail(&self.hooks.error(py, &error, &self.name)),
                Ok(result) if is_awaitable(&result) => self.start(py, batch, result),
                Ok(result) => answer(py, &self.hooks, &self.name, batch, &result),
            }
        });
    }
}

impl BatchRunner {
    /// Start an `async def` batch on the server's asyncio loop; its task answers the batch.
    fn start(&self, py: Python<'_>, batch: Batch, coroutine: Bound<'_, PyAny>) {
        let Some(submit) = &self.hooks.submit else {
            batch.fail(&RpcError::internal(
                "Internal error: no event loop for an async batch procedure",
            ));
            return;
        };
        let reply = BatchReply {
            batch: Mutex::new(Some(batch)),
            hooks: Arc::clone(&self.hooks),
            method: Arc::clone(&self.name),
        };
        let reply = match Bound::new(py, reply) {
            Ok(reply) => reply,
            // The batch went down with the reply: each call answers -32603.
            Err(e) => return e.write_unraisable(py, None),
        };
        // No deadline (`None`): batch procedures take none yet.
        let item = [coroutine, reply.clone().into_any(), py.None().into_bound(py)];
        let list = PyTuple::new(py, item).and_then(|item| PyList::new(py, [item]));
        if let Err(e) = list.and_then(|list| submit.bind(py).call1((list,))) {
            // The loop is gone (the server is stopping).
            reply.get().fail(py, &e);
        }
    }
}

/// Answer each call of `batch` with its value in `result` (a sequence, one per call).
fn answer(py: Python<'_>, hooks: &Hooks, method: &str, batch: Batch, result: &Bound<'_, PyAny>) {
    let items: PyResult<Vec<Bound<'_, PyAny>>> = result.try_iter().and_then(|iter| iter.collect());
    let Ok(items) = items else {
        let kind = result.get_type().name().map_or_else(|_| "?".into(), |n| n.to_string());
        log::error!(target: "ucall", "batch procedure '{method}' returned a {kind}, not a list");
        batch.fail(&RpcError::internal(format!(
            "Internal error: batch procedure '{method}' returned a {kind}, not a list"
        )));
        return;
    };
    let outcomes = items
        .iter()
        .map(|item| {
            if item.is_instance_of::<PyBaseException>() {
                return Err(hooks.error(py, &PyErr::from_value(item.clone()), method));
            }
            let mut out = Vec::with_capacity(16);
            hooks.serialize(item, &mut out).map(|()| out)
        })
        .collect();
    batch.complete(outcomes);
}

/// The replies of an `async def` batch, completed when its task finishes.
#[pyclass(module = "ucall._ucall", frozen)]
pub struct BatchReply {
    batch: Mutex<Option<Batch>>,
    hooks: Arc<Hooks>,
    method: Arc<str>,
}

#[pymethods]
impl BatchReply {
    /// Complete the batch from a finished `asyncio.Task` (a done-callback).
    fn settle(&self, py: Python<'_>, task: &Bound<'_, PyAny>) {
        let Some(batch) = self.batch.lock().unwrap_or_else(PoisonError::into_inner).take() else {
            return;
        };
        if task
            .call_method0("cancelled")
            .and_then(|c| c.is_truthy())
            .unwrap_or(false)
        {
            batch.fail(&RpcError::internal("Internal error: the call was cancelled"));
            return;
        }
        match task.call_method0("result") {
            Ok(result) => answer(py, &self.hooks, &self.method, batch, &result),
            Err(e) => batch.fail(&self.hooks.error(py, &e, &self.method)),
        }
    }
}

impl BatchReply {
    fn fail(&self, py: Python<'_>, error: &PyErr) {
        if let Some(batch) = self.batch.lock().unwrap_or_else(PoisonError::into_inner).take() {
            batch.fail(&self.hooks.error(py, error, &self.method));
        }
    }
}

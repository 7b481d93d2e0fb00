// SPDX-License-Identifier: Apache-2.0
//! Binding a call's params to a Python function's parameters, with Python's rules.
//!
//! The pure-Python layer reads the signature and type hints once, at registration, and
//! hands over a [`Plan`]: each parameter's name, kind, default and check. Common checks
//! (`int`, `float`, `bool`, `str`, `bytes`, none) run here with the core's params layer
//! ([`Value`]), so their rules are those of the C and Rust APIs; Python adds its own on
//! top (an integral float is an `int`, integers have no size limit). Any other type hint
//! is a Python converter called with the decoded value.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyString, PyTuple};

use ucall_core::jsonrpc::attachment::{Attachment, Dtype};
use ucall_core::params::base64;
use ucall_core::{Param as Value, Params, RpcError};

use crate::attachment::AttachmentMemory;
use crate::convert;
use crate::npy;

/// A parameter's kind, numbered as `inspect.Parameter.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Before `/`.
    PositionalOnly,
    /// The usual kind.
    PositionalOrKeyword,
    /// `*args`.
    VarPositional,
    /// After `*` or `*args`.
    KeywordOnly,
    /// `**kwargs`.
    VarKeyword,
}

impl Kind {
    fn from_index(kind: u8) -> PyResult<Self> {
        Ok(match kind {
            0 => Kind::PositionalOnly,
            1 => Kind::PositionalOrKeyword,
            2 => Kind::VarPositional,
            3 => Kind::KeywordOnly,
            4 => Kind::VarKeyword,
            _ => return Err(pyo3::exceptions::PyValueError::new_err("unknown parameter kind")),
        })
    }
}

/// How a parameter's value is checked and converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Any JSON value, as decoded.
    Any,
    /// An integer (an integral float is accepted; booleans are not).
    Int,
    /// A number (integers become floats; booleans are not numbers).
    Float,
    /// `true` or `false`.
    Bool,
    /// A string.
    Str,
    /// The Python converter decides.
    Custom,
    /// A base64 string, decoded to `bytes`.
    Bytes,
    /// A base64 string, decoded to `bytearray`.
    ByteArray,
    /// A numpy array: as `Custom`, but a flat JSON array of numbers that `numpy.asarray`
    /// would make float64 reaches the converter as `(bytearray, "float64", (n,))`, parsed
    /// here (1,024 floats take about 15 µs rather than 115 µs as a list of Python floats);
    /// a base64 `.npy` file of a dtype the wire lists is decoded here straight into the
    /// array the handler gets ([`npy::decode`]), any other reaches it as a `bytearray`. An attachment reaches it as an `AttachmentMemory` whose
    /// `__array_interface__` gives its dtype and shape: its bytes where they lie, never
    /// copied.
    NdArray,
    /// A value read from bytes in place (a `memoryview`, a PIL image): as `Custom`, but an
    /// attachment reaches the converter as its `AttachmentMemory`, and a base64 string
    /// decoded, as `bytes`.
    View,
}

impl Check {
    fn from_index(check: u8) -> PyResult<Self> {
        Ok(match check {
            0 => Check::Any,
            1 => Check::Int,
            2 => Check::Float,
            3 => Check::Bool,
            4 => Check::Str,
            5 => Check::Custom,
            6 => Check::Bytes,
            7 => Check::ByteArray,
            8 => Check::NdArray,
            9 => Check::View,
            _ => return Err(pyo3::exceptions::PyValueError::new_err("unknown parameter check")),
        })
    }
}

/// One parameter of the function.
pub struct Param {
    name: String,
    py_name: Py<PyString>,
    kind: Kind,
    check: Check,
    converter: Option<Py<PyAny>>,
    default: Option<Py<PyAny>>,
}

/// Everything needed to bind params to one function.
pub struct Plan {
    /// Named parameters in signature order (positional ones first), without `*args`/`**kwargs`.
    params: Vec<Param>,
    /// How many of `params` may be given by position.
    positional: usize,
    var_positional: Option<Param>,
    var_keyword: Option<Param>,
    ignore_extra: bool,
}

/// A parameter as described from Python: `(name, kind, check, converter, has_default, default)`.
pub type ParamSpec = (String, u8, u8, Option<Py<PyAny>>, bool, Option<Py<PyAny>>);

impl Plan {
    /// Build a plan from the Python description.
    ///
    /// # Errors
    /// `ValueError` on an unknown kind or check, or a `Custom` check without converter.
    pub fn new(py: Python<'_>, specs: Vec<ParamSpec>, ignore_extra: bool) -> PyResult<Self> {
        let mut plan = Plan {
            params: Vec::new(),
            positional: 0,
            var_positional: None,
            var_keyword: None,
            ignore_extra,
        };
        for (name, kind, check, converter, has_default, default) in specs {
            let check = Check::from_index(check)?;
            if matches!(check, Check::Custom | Check::NdArray | Check::View) && converter.is_none() {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a custom check needs a converter",
                ));
            }
            let param = Param {
                py_name: PyString::intern(py, &name).unbind(),
                name,
                kind: Kind::from_index(kind)?,
                check,
                converter,
                default: if has_default {
                    default.or_else(|| Some(py.None()))
                } else {
                    None
                },
            };
            match param.kind {
                Kind::VarPositional => plan.var_positional = Some(param),
                Kind::VarKeyword => plan.var_keyword = Some(param),
                Kind::PositionalOnly | Kind::PositionalOrKeyword => {
                    plan.positional += 1;
                    plan.params.push(param);
                }
                Kind::KeywordOnly => plan.params.push(param),
            }
        }
        Ok(plan)
    }

    /// Bind the raw `params` of a call: positional arguments and keyword arguments.
    ///
    /// # Errors
    /// `-32602` naming the parameter that is missing, unexpected or of the wrong type.
    pub fn bind<'py>(
        &self,
        py: Python<'py>,
        params: Params<'_>,
    ) -> Result<(Bound<'py, PyTuple>, Option<Bound<'py, PyDict>>), RpcError> {
        let mut slots: Vec<Option<Bound<'py, PyAny>>> = Vec::with_capacity(self.params.len());
        slots.resize_with(self.params.len(), || None);
        let mut extra_positional = Vec::new();
        let mut extra_keywords: Option<Bound<'py, PyDict>> = None;
        match params.value() {
            Some(value) if value.raw().starts_with('[') => {
                for (index, item) in value.elements().enumerate() {
                    if index < self.positional {
                        slots[index] = Some(convert_param(py, &self.params[index], item, Given::Named)?);
                    } else if let Some(var) = &self.var_positional {
                        extra_positional.push(convert_param(py, var, item, Given::At(index))?);
                    } else if !self.ignore_extra {
                        return Err(too_many(self.positional, value.elements().count()));
                    } else {
                        break;
                    }
                }
            }
            Some(value) if value.raw().starts_with('{') => {
                for (key, item) in value.members() {
                    let key = key.raw();
                    let found = self
                        .params
                        .iter()
                        .position(|p| p.kind != Kind::PositionalOnly && Value::new(key).str_equals(&p.name));
                    if let Some(index) = found {
                        slots[index] = Some(convert_param(py, &self.params[index], item, Given::Named)?);
                    } else if let Some(var) = &self.var_keyword {
                        let name = convert::string(py, key).map_err(|_| RpcError::invalid_params("Invalid params"))?;
                        let value = convert_param(py, var, item, Given::Key(key))?;
                        let dict = extra_keywords.get_or_insert_with(|| PyDict::new(py));
                        dict.set_item(name, value).map_err(|e| internal(py, &e))?;
                    } else if !self.ignore_extra {
                        return Err(unexpected(py, key, self));
                    }
                }
            }
            _ => {}
        }
        let mut args = Vec::with_capacity(self.positional + extra_positional.len());
        let mut keywords = extra_keywords;
        for (param, slot) in self.params.iter().zip(slots) {
            let value = match (slot, &param.default) {
                (Some(value), _) => value,
                (None, Some(default)) => default.bind(py).clone(),
                (None, None) => return Err(RpcError::missing_param(&param.name)),
            };
            if param.kind == Kind::KeywordOnly {
                let dict = keywords.get_or_insert_with(|| PyDict::new(py));
                dict.set_item(param.py_name.bind(py), value)
                    .map_err(|e| internal(py, &e))?;
            } else {
                args.push(value);
            }
        }
        args.extend(extra_positional);
        let args = PyTuple::new(py, args).map_err(|e| internal(py, &e))?;
        Ok((args, keywords))
    }
}

fn convert_param<'py>(
    py: Python<'py>,
    param: &Param,
    item: Value<'_>,
    given: Given<'_>,
) -> Result<Bound<'py, PyAny>, RpcError> {
    let raw = item.raw().trim();
    let value = Value::in_message(raw, item.section());
    let fail = |what: &str| wrong_type(param, given, what, raw);
    match value.attachment() {
        // A parameter that takes no bytes refuses it below, as any object.
        Ok(Some(found)) => {
            if let Some(converted) = attachment(py, param, found, given) {
                return converted;
            }
        }
        Ok(None) => {}
        Err(rule) => return Err(invalid_placeholder(param, given, rule)),
    }
    match param.check {
        Check::Any => convert::to_python(py, raw).map_err(|_| fail("a JSON value")),
        Check::Int if value.is_number() => int(py, value).ok_or_else(|| fail("an integer")),
        Check::Float if value.is_number() => value
            .as_f64()
            .map(|f| PyFloat::new(py, f).into_any())
            .ok_or_else(|| fail("a number")),
        Check::Bool => value
            .as_bool()
            .map(|b| PyBool::new(py, b).to_owned().into_any())
            .ok_or_else(|| fail("a boolean")),
        Check::Str if value.is_string() => convert::string(py, raw).map(Bound::into_any).map_err(|_| {
            // The one string JSON can spell that Python's `str` (Unicode text) cannot hold.
            wrong_value(
                param,
                given,
                "expected Unicode text: it holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape)",
            )
        }),
        Check::Bytes | Check::ByteArray if value.is_string() => value
            .with_base64(|text| decode_base64(py, text, param.check == Check::ByteArray))
            .ok_or_else(|| {
                let why = value.as_str().map_or_else(
                    || "it holds a lone surrogate".to_owned(),
                    |text| base64::problem(text.as_bytes()),
                );
                wrong_value(param, given, &format!("expected a base64 string: {why}"))
            }),
        Check::Bytes | Check::ByteArray => Err(fail("a base64 string")),
        Check::Int => Err(fail("an integer")),
        Check::Float => Err(fail("a number")),
        Check::Str => Err(fail("a string")),
        Check::NdArray if raw.starts_with('[') || value.is_string() => {
            let converter = param.converter.as_ref().map(|c| c.bind(py));
            // Base64 that does not decode goes to the converter as text, to say why.
            let decoded = if value.is_string() {
                // A `.npy` file of a dtype the wire lists: its array, decoded here.
                if let Some(array) = value.with_base64(|text| npy::decode(py, text)) {
                    return Ok(array);
                }
                value.with_base64(|text| decode_base64(py, text, true))
            } else {
                float64s(py, raw)
            };
            let value = match decoded {
                Some(value) => value,
                None => convert::to_python(py, raw).map_err(|_| fail("a JSON value"))?,
            };
            let Some(converter) = converter else { return Ok(value) };
            converter
                .call1((value,))
                .map_err(|e| converter_failed(py, param, given, &e))
        }
        Check::View if value.is_string() => {
            let decoded = value.with_base64(|text| decode_base64(py, text, false));
            let value = match decoded {
                Some(value) => value,
                None => convert::to_python(py, raw).map_err(|_| fail("a JSON value"))?,
            };
            let converter = param.converter.as_ref().map(|c| c.bind(py));
            let Some(converter) = converter else { return Ok(value) };
            converter
                .call1((value,))
                .map_err(|e| converter_failed(py, param, given, &e))
        }
        Check::Custom | Check::NdArray | Check::View => {
            let value = convert::to_python(py, raw).map_err(|_| fail("a JSON value"))?;
            let converter = param.converter.as_ref().map(|c| c.bind(py));
            let Some(converter) = converter else { return Ok(value) };
            converter
                .call1((value,))
                .map_err(|e| converter_failed(py, param, given, &e))
        }
    }
}

/// The value of an attachment (docs/wire.md) for `param`: `bytes` (a copy: a `bytes`
/// object owns its memory), a `bytearray` (a copy, being mutable), for a type the
/// converter reads from bytes in place (a numpy array, a memoryview, an image) the
/// converter called with the attachment's memory where it lies ([`AttachmentMemory`],
/// for an array with its dtype and shape: numpy views it by its `__array_interface__`);
/// `None` where the parameter takes no bytes (a number, a string).
fn attachment<'py>(
    py: Python<'py>,
    param: &Param,
    found: Attachment<'_>,
    given: Given<'_>,
) -> Option<Result<Bound<'py, PyAny>, RpcError>> {
    let converted = match param.check {
        Check::Int | Check::Float | Check::Bool | Check::Str => return None,
        Check::Any | Check::Bytes => return Some(Ok(PyBytes::new(py, found.bytes).into_any())),
        Check::ByteArray => return Some(Ok(PyByteArray::new(py, found.bytes).into_any())),
        Check::Custom => {
            let bytes = PyBytes::new(py, found.bytes).into_any();
            let converter = param.converter.as_ref()?.bind(py);
            converter.call1((bytes,))
        }
        Check::View => {
            let memory = Bound::new(py, AttachmentMemory::keep(found.bytes));
            let converter = param.converter.as_ref()?.bind(py);
            memory.and_then(|memory| converter.call1((memory,)))
        }
        Check::NdArray => {
            // The attachment viewed in place, read-only (bytes as uint8 of one dimension).
            let (dtype, shape) = match found.array {
                Some(array) => (array.dtype, array.shape().collect()),
                None => (Dtype::Uint8, vec![found.bytes.len()]),
            };
            let memory = AttachmentMemory::keep(found.bytes);
            let data = memory.as_ptr();
            Bound::new(py, memory)
                .and_then(|memory| crate::ndarray::view(memory.into_any(), data, dtype, &shape, false))
        }
    };
    Some(converted.map_err(|e| converter_failed(py, param, given, &e)))
}

/// Bytes of `params`: their text and any attachment section (what a call moves).
pub fn size(params: Params<'_>) -> usize {
    params.raw().map_or(0, str::len) + params.section().map_or(0, <[u8]>::len)
}

#[cold]
#[inline(never)]
fn invalid_placeholder(param: &Param, given: Given<'_>, rule: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "Invalid params: parameter '{}': invalid placeholder: {rule}",
        label(param, given)
    ))
}

/// A flat JSON array of numbers, one of them with a fraction or an exponent (so that
/// `numpy.asarray` of it is float64), as a `bytearray` of native float64s; `None` for
/// any other array (integers only, nested, mixed with other values).
fn float64s<'py>(py: Python<'py>, raw: &str) -> Option<Bound<'py, PyAny>> {
    let floats: Vec<f64> = serde_json::from_str(raw).ok()?;
    // Only numbers remain, so these bytes belong to a number's fraction or exponent.
    if !raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        return None;
    }
    let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
    let data = PyByteArray::new(py, &bytes);
    let shape = PyTuple::new(py, [floats.len()]).ok()?;
    (data, "float64", shape).into_pyobject(py).ok().map(Bound::into_any)
}

/// Base64 `text` (the core's rule: `ucall_core::params::base64`) decoded into a new
/// `bytes` (or `bytearray`). SIMD decoding writes straight into the Python object: a
/// 1.6 MB payload is neither copied nor zeroed on the way.
pub(crate) fn decode_base64<'py>(py: Python<'py>, text: &[u8], bytearray: bool) -> Option<Bound<'py, PyAny>> {
    let len = base64::decoded_len(text)?;
    let size = pyo3::ffi::Py_ssize_t::try_from(len).ok()?;
    // SAFETY: a new `bytes` (or `bytearray`) of `len` uninitialised bytes, owned here and
    // shared with no one until it is returned; the decoder writes all `len` of them (a
    // failed decode drops the object unseen). PyO3's `new_with` would first zero them: a
    // pass over the payload for nothing.
    unsafe {
        let object = if bytearray {
            pyo3::ffi::PyByteArray_FromStringAndSize(std::ptr::null(), size)
        } else {
            pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size)
        };
        let decoded = Bound::from_owned_ptr_or_opt(py, object)?;
        if len == 0 {
            return Some(decoded); // an empty bytearray may have no buffer at all
        }
        let data = if bytearray {
            pyo3::ffi::PyByteArray_AsString(object)
        } else {
            pyo3::ffi::PyBytes_AsString(object)
        };
        let buf = std::slice::from_raw_parts_mut(data.cast::<std::mem::MaybeUninit<u8>>(), len);
        base64::decode_into_with(text, buf, ucall_client::base64::decode_groups).then_some(decoded)
    }
}

/// An integer from a JSON number: exact at any size; an integral float is accepted.
fn int<'py>(py: Python<'py>, value: Value<'_>) -> Option<Bound<'py, PyAny>> {
    if let Some(small) = value.as_i64() {
        return small.into_pyobject(py).ok().map(Bound::into_any);
    }
    let raw = value.raw();
    if !raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        return convert::to_python(py, raw).ok();
    }
    let float: f64 = raw.parse().ok()?;
    if !float.is_finite() || float.fract() != 0.0 {
        return None;
    }
    let float = PyFloat::new(py, float);
    py.get_type::<PyInt>().call1((float,)).ok()
}

/// How a value reached its parameter, for messages that name it.
#[derive(Clone, Copy)]
enum Given<'a> {
    /// By the parameter's own name or position.
    Named,
    /// At this position of the params array, into `*args`.
    At(usize),
    /// Under this key of the params object (raw JSON, quoted), into `**kwargs`: the key is
    /// what the caller wrote, so it names the value.
    Key(&'a str),
}

fn label(param: &Param, given: Given<'_>) -> String {
    match given {
        Given::Named => param.name.clone(),
        Given::At(i) => format!("{}[{i}]", param.name),
        Given::Key(raw) => raw.get(1..raw.len().saturating_sub(1)).unwrap_or(raw).to_owned(),
    }
}

/// What kind of JSON value `raw` is, for messages.
fn json_kind(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(_) if raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) => "a non-integral number",
        Some(_) => "an integer",
        None => "nothing",
    }
}

#[cold]
#[inline(never)]
fn wrong_type(param: &Param, given: Given<'_>, expected: &str, raw: &str) -> RpcError {
    let mut got = json_kind(raw);
    if expected == "an integer" && got == "a non-integral number" {
        if let Ok(f) = raw.parse::<f64>() {
            if f.is_finite() && f.fract() == 0.0 {
                got = "a number too large";
            }
        }
    }
    RpcError::invalid_params(format!(
        "Invalid params: parameter '{}': expected {expected}, got {got}",
        label(param, given)
    ))
}

/// `-32602` for a value of the right JSON type that the parameter still cannot take.
#[cold]
#[inline(never)]
fn wrong_value(param: &Param, given: Given<'_>, why: &str) -> RpcError {
    RpcError::invalid_params(format!("Invalid params: parameter '{}': {why}", label(param, given)))
}

#[cold]
#[inline(never)]
fn converter_failed(py: Python<'_>, param: &Param, given: Given<'_>, error: &PyErr) -> RpcError {
    let text = error.value(py).to_string();
    RpcError::invalid_params(format!("Invalid params: parameter '{}': {text}", label(param, given)))
}

#[cold]
#[inline(never)]
fn too_many(expected: usize, got: usize) -> RpcError {
    RpcError::invalid_params(format!(
        "Invalid params: expected at most {expected} positional parameters, got {got}"
    ))
}

#[cold]
#[inline(never)]
fn unexpected(py: Python<'_>, key: &str, plan: &Plan) -> RpcError {
    let name = convert::string(py, key).map_or_else(|_| key.to_owned(), |s| s.to_string());
    if plan
        .params
        .iter()
        .any(|p| p.kind == Kind::PositionalOnly && p.name == name)
    {
        return RpcError::invalid_params(format!(
            "Invalid params: parameter '{name}' is positional-only: pass params as an array"
        ));
    }
    RpcError::invalid_params(format!("Invalid params: unexpected parameter '{name}'"))
}

#[cold]
#[inline(never)]
fn internal(py: Python<'_>, error: &PyErr) -> RpcError {
    RpcError::internal(format!("Internal error: {}", error.value(py)))
}

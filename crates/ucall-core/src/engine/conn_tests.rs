// SPDX-License-Identifier: Apache-2.0
//! Whole conversations with one [`Conn`], in memory: bytes in, bytes out, no sockets
//! (as quiche's `Pipe` tests do). Each case is a table of steps and what must hold after.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::conn::*;
use super::{Context, Sink};
use crate::buffer::OutBuf;
use crate::defer::{Completion, Deferred, Target};
use crate::engine::Config;
use crate::jsonrpc::RpcError;
use crate::router::{Call, Reply, Router};
use crate::session::{Limits, Scratch};

const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

/// One connection and what its worker would hand it.
struct Pipe {
    conn: Conn,
    procedures: Router,
    limits: Limits,
    scratch: Scratch,
    sink: Arc<Sink>,
    /// Calls deferred by `later`, completed by the test.
    deferred: Arc<Mutex<Vec<Deferred>>>,
    now: Instant,
    config: Config,
    /// Everything the connection has sent so far.
    sent: Vec<u8>,
}

/// What the test does next.
#[derive(Debug, Clone, Copy)]
enum Step<'a> {
    /// The client's bytes arrive.
    Send(&'a [u8]),
    /// The client shuts its sending side.
    Eof,
    /// The engine sends everything queued (as much as `Some(n)` bytes).
    Flush(Option<usize>),
    /// Every deferred call completes with `true`.
    CompleteDeferred,
    /// Time passes; then the engine checks the deadline.
    Wait(Duration),
}

impl Pipe {
    fn new() -> Self {
        let deferred = Arc::new(Mutex::new(Vec::new()));
        let parked = Arc::clone(&deferred);
        let mut procedures = Router::new();
        procedures.insert(
            "sum",
            Arc::new(|call: &Call<'_>, reply: &mut Reply<'_>| {
                reply.json(&(call.get::<i64>(0, "a")? + call.get::<i64>(1, "b")?))
            }),
        );
        procedures.insert(
            "echo",
            Arc::new(|call: &Call<'_>, reply: &mut Reply<'_>| reply.json(&call.get::<String>(0, "data")?)),
        );
        procedures.insert(
            "later",
            Arc::new(move |_: &Call<'_>, reply: &mut Reply<'_>| -> Result<(), RpcError> {
                let handle = reply.defer()?;
                parked.lock().expect("not poisoned").push(handle);
                Ok(())
            }),
        );
        let now = Instant::now();
        let config = Config {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            ..Config::default()
        };
        Pipe {
            conn: Conn::new(1, None, None, now),
            procedures,
            limits: Limits::default(),
            scratch: Scratch::default(),
            sink: Sink::new(|| {}),
            deferred,
            now,
            config,
            sent: Vec::new(),
        }
    }

    /// Do `step`, then what an engine does after news: feed a backlog there is room for,
    /// answer the end of input.
    fn step(&mut self, step: Step<'_>) {
        let mut ctx = Context {
            router: &self.procedures,
            limits: &self.limits,
            date: DATE,
            scratch: &mut self.scratch,
            defer: Some(Target {
                sink: &self.sink,
                conn: 0,
                generation: self.conn.generation,
                presence: None,
                cancellation: None,
            }),
            draining: false,
        };
        match step {
            Step::Send(bytes) => self.conn.deliver(bytes, &mut ctx, self.now, 0),
            Step::Eof => self.conn.input_ended = true,
            Step::Flush(limit) => {
                let mut sending = OutBuf::new();
                self.conn.seal_into(&mut sending);
                let bytes = sending.to_vec();
                let sent = limit.map_or(bytes.len(), |n| n.min(bytes.len()));
                self.sent.extend_from_slice(&bytes[..sent]);
                sending.advance(sent);
                // What was not sent goes back in front of what came meanwhile.
                let rest = sending.to_vec();
                if !rest.is_empty() {
                    let mut out = OutBuf::new();
                    out.push(&rest);
                    let queued = std::mem::replace(&mut self.conn.out, out);
                    self.conn.out.push(&queued.to_vec());
                }
            }
            Step::CompleteDeferred => {
                for handle in self.deferred.lock().expect("not poisoned").drain(..) {
                    handle.json(&true);
                }
                let mut completions: Vec<Completion> = Vec::new();
                self.sink.drain(&mut completions);
                for completion in completions {
                    self.conn.complete(completion, DATE);
                }
            }
            Step::Wait(time) => {
                self.now += time;
                if self.conn.deadline(&self.config).is_some_and(|at| at <= self.now) {
                    self.conn.time_out(DATE, None);
                }
            }
        }
        self.conn.feed_backlog(&mut ctx, 0);
        self.conn.answer_end_of_input(&mut ctx);
        self.conn.track_clocks(self.now);
    }

    /// How many replies have been sent, counted by `marker` (once in each).
    fn replies(&self, marker: &str) -> usize {
        self.sent
            .windows(marker.len())
            .filter(|w| *w == marker.as_bytes())
            .count()
    }
}

fn post(body: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn call(method: &str, params: &str, id: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":{id}}}"#)
}

/// What holds at the end of a conversation.
struct Expect {
    phase: fn(Phase) -> bool,
    /// Replies sent, each counted by this marker.
    replies: (&'static str, usize),
    /// Whether, once all is sent, the close must linger.
    linger: Option<bool>,
    /// Whether the connection wants more input.
    wants_input: bool,
}

fn open(phase: Phase) -> bool {
    phase == Phase::Open
}

fn closing(phase: Phase) -> bool {
    phase == Phase::Closing
}

fn backlogged(phase: Phase) -> bool {
    phase == Phase::Backlogged
}

#[test]
fn conversations() {
    let three_sums: Vec<u8> = (1..=3).flat_map(|id| post(&call("sum", "[1,2]", id))).collect();
    let body = call("sum", "[1,2]", 1);
    let close_asked = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let mut close_then_more = close_asked.clone();
    close_then_more.extend(post(&call("sum", "[1,2]", 2)));
    let big = "x".repeat(300 << 10);
    let five_big: Vec<u8> = (1..=5)
        .flat_map(|id| post(&call("echo", &format!(r#"["{big}"]"#), id)))
        .collect();
    let tcp_three = format!(
        "{}\n{}\n{}\n",
        call("sum", "[1,2]", 1),
        call("sum", "[1,2]", 2),
        call("sum", "[1,2]", 3)
    );
    let later_then_sum = format!("{}{}", call("later", "[]", 1), call("sum", "[1,2]", 2));
    let half_head = b"POST / HTTP/1.1\r\nHost: x\r\n".as_slice();

    let cases: Vec<(&str, Vec<Step<'_>>, Expect)> = vec![
        (
            "pipelined requests are answered in order in one go",
            vec![Step::Send(&three_sums), Step::Flush(None)],
            Expect {
                phase: open,
                replies: ("\"result\":3", 3),
                linger: None,
                wants_input: true,
            },
        ),
        (
            "a request split anywhere waits for its end",
            vec![
                Step::Send(&three_sums[..7]),
                Step::Flush(None),
                Step::Send(&three_sums[7..90]),
                Step::Send(&three_sums[90..]),
                Step::Flush(None),
            ],
            Expect {
                phase: open,
                replies: ("\"result\":3", 3),
                linger: None,
                wants_input: true,
            },
        ),
        (
            "a half-close is answered, then the connection closes without lingering",
            vec![Step::Send(&three_sums), Step::Eof, Step::Flush(None)],
            Expect {
                phase: closing,
                replies: ("\"result\":3", 3),
                linger: Some(false),
                wants_input: false,
            },
        ),
        (
            "raw TCP: a number cut by the end of input is an invalid Request",
            vec![Step::Send(b"42"), Step::Eof, Step::Flush(None)],
            Expect {
                phase: closing,
                replies: ("-32600", 1),
                linger: Some(false),
                wants_input: false,
            },
        ),
        (
            "Connection: close with nothing after it closes at once, still listening meanwhile",
            vec![Step::Send(&close_asked), Step::Flush(None)],
            Expect {
                phase: closing,
                replies: ("\"result\":3", 1),
                linger: Some(false),
                wants_input: true,
            },
        ),
        (
            "Connection: close with a request after it lingers",
            vec![Step::Send(&close_then_more), Step::Flush(None)],
            Expect {
                phase: closing,
                replies: ("\"result\":3", 1),
                linger: Some(true),
                wants_input: true,
            },
        ),
        (
            "output over the high-water mark holds the rest back",
            vec![Step::Send(&five_big)],
            Expect {
                phase: backlogged,
                replies: ("\"result\"", 0),
                linger: None,
                wants_input: false,
            },
        ),
        (
            "a backlog goes on as the output drains, in pieces",
            vec![
                Step::Send(&five_big),
                Step::Flush(Some(100_000)),
                Step::Flush(None),
                Step::Flush(None),
                Step::Flush(None),
            ],
            Expect {
                phase: open,
                replies: ("\"result\"", 5),
                linger: None,
                wants_input: true,
            },
        ),
        (
            "raw TCP texts back to back",
            vec![Step::Send(tcp_three.as_bytes()), Step::Flush(None)],
            Expect {
                phase: open,
                replies: ("\"result\":3", 3),
                linger: None,
                wants_input: true,
            },
        ),
        (
            "a deferred reply keeps its place before a later one",
            vec![Step::Send(later_then_sum.as_bytes()), Step::Flush(None)],
            Expect {
                phase: open,
                replies: ("\"result\"", 0),
                linger: None,
                wants_input: true,
            },
        ),
        (
            "and both leave once it completes",
            vec![
                Step::Send(later_then_sum.as_bytes()),
                Step::Flush(None),
                Step::CompleteDeferred,
                Step::Flush(None),
            ],
            Expect {
                phase: open,
                replies: ("\"result\"", 2),
                linger: None,
                wants_input: true,
            },
        ),
        (
            "a head not finished within the header time-out gets a 408",
            vec![
                Step::Send(half_head),
                Step::Wait(Duration::from_secs(6)),
                Step::Flush(None),
            ],
            Expect {
                phase: closing,
                replies: ("HTTP/1.1 408", 1),
                linger: Some(true),
                wants_input: false,
            },
        ),
        (
            "an idle connection times out silently",
            vec![Step::Wait(Duration::from_secs(61)), Step::Flush(None)],
            Expect {
                phase: closing,
                replies: ("HTTP", 0),
                linger: Some(true),
                wants_input: false,
            },
        ),
        (
            "garbage on raw TCP: -32700, then the close",
            vec![Step::Send(b"hello\n"), Step::Flush(None)],
            Expect {
                phase: closing,
                replies: ("-32700", 1),
                linger: Some(true),
                wants_input: false,
            },
        ),
    ];
    let mut failures = Vec::new();
    for (name, steps, expect) in cases {
        let mut pipe = Pipe::new();
        for step in &steps {
            pipe.step(*step);
        }
        let (marker, count) = expect.replies;
        let phase = pipe.conn.phase;
        let mut problems = Vec::new();
        if !(expect.phase)(phase) {
            problems.push(format!("phase {phase:?}"));
        }
        if pipe.replies(marker) != count {
            problems.push(format!("{} replies with {marker:?}, not {count}", pipe.replies(marker)));
        }
        if let Some(linger) = expect.linger {
            if pipe.conn.must_linger(false) != linger {
                problems.push(format!("must_linger is {}", !linger));
            }
        }
        if pipe.conn.wants_input(0, Some(&pipe.sink)) != expect.wants_input {
            problems.push(format!("wants_input is {}", !expect.wants_input));
        }
        if !problems.is_empty() {
            failures.push(format!("{name}: {}", problems.join(", ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn lingering_drops_input_until_its_deadline() {
    let mut pipe = Pipe::new();
    pipe.conn.phase = Phase::Closing;
    let now = pipe.now;
    pipe.conn.linger(now);
    assert_eq!(pipe.conn.lingering_until(), Some(now + super::LINGER));
    pipe.step(Step::Send(b"more"));
    assert!(pipe.conn.input.is_empty() && pipe.conn.dropped_input);
    assert!(pipe.conn.wants_input(0, None), "listens for the client's close");
    assert_eq!(pipe.conn.deadline(&pipe.config), Some(now + super::LINGER));
}

/// A WebSocket upgrade request (RFC 6455 §1.3's sample key).
fn ws_upgrade() -> Vec<u8> {
    b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
      Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        .to_vec()
}

/// One masked text frame (RFC 6455 §5.2).
fn ws_text(payload: &str) -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | u8::try_from(payload.len()).expect("short")];
    frame.extend_from_slice(&mask);
    frame.extend(payload.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[test]
fn an_idle_connection_gives_its_buffers_back_and_goes_on_serving() {
    let upgrade = ws_upgrade();
    let first = ws_text(&call("sum", "[1,2]", 1));
    let second = ws_text(&call("sum", "[3,4]", 2));
    let http_first = post(&call("sum", "[1,2]", 1));
    let http_second = post(&call("sum", "[3,4]", 2));
    for (name, opening, again) in [
        ("HTTP", vec![http_first.as_slice()], http_second.as_slice()),
        (
            "WebSocket",
            vec![upgrade.as_slice(), first.as_slice()],
            second.as_slice(),
        ),
    ] {
        let mut pipe = Pipe::new();
        assert_eq!(pipe.conn.trim_at(false), None, "{name}: a new connection holds nothing");
        for bytes in opening {
            pipe.step(Step::Send(bytes));
            pipe.step(Step::Flush(None));
        }
        let answered = pipe.now;
        pipe.conn.out.shrink(OUTPUT_KEEP); // as the engines do once all is sent
        assert_eq!(
            pipe.conn.trim_at(false),
            Some(answered + IDLE_TRIM),
            "{name}: held until idle"
        );
        pipe.conn.release_buffers();
        assert_eq!(pipe.conn.trim_at(false), None, "{name}: nothing is held once released");
        assert!(
            !pipe.conn.out.holds_memory() && !pipe.conn.session.holds_buffers(),
            "{name}"
        );
        // The engine may say that it holds buffers of its own for the connection.
        assert_eq!(pipe.conn.trim_at(true), Some(answered + IDLE_TRIM), "{name}");
        pipe.now += IDLE_TRIM;
        pipe.step(Step::Send(again));
        pipe.step(Step::Flush(None));
        assert_eq!(pipe.replies(r#""result":7"#), 1, "{name}: served after the release");
        assert_eq!(pipe.conn.phase, Phase::Open, "{name}");
    }
}

#[test]
fn a_connection_mid_request_keeps_its_buffers() {
    let mut pipe = Pipe::new();
    pipe.step(Step::Send(&post(&call("sum", "[1,2]", 1))));
    pipe.step(Step::Flush(None));
    // Half a head is in: its bytes live in the input, and the session awaits the rest.
    pipe.step(Step::Send(b"POST / HTTP/1.1\r\nHost: x\r\n"));
    assert_eq!(pipe.conn.trim_at(false), None);
    // Half a WebSocket message likewise.
    let mut pipe = Pipe::new();
    pipe.step(Step::Send(&ws_upgrade()));
    pipe.step(Step::Flush(None));
    let frame = ws_text(&call("sum", "[1,2]", 1));
    pipe.step(Step::Send(&frame[..frame.len() / 2]));
    assert_eq!(pipe.conn.trim_at(false), None);
    pipe.conn.session.release_buffers(); // refused mid-message
    pipe.step(Step::Send(&frame[frame.len() / 2..]));
    pipe.step(Step::Flush(None));
    assert_eq!(pipe.replies(r#""result":3"#), 1);
}

/// A raw TCP binary message: a `keep` call whose one attachment is `len` bytes of `fill`.
fn keep_call(fill: u8, len: usize) -> Vec<u8> {
    let text = format!(
        r#"{{"jsonrpc":"2.0","method":"keep","params":[{{"$ucall":"bytes","offset":0,"length":{len}}}],"id":1}}"#
    );
    let mut body = text.clone().into_bytes();
    body.resize(crate::wire::align(text.len()), b' ');
    body.resize(body.len() + len, fill);
    let prefix = crate::wire::Prefix::encode(u32::try_from(text.len()).expect("short"), body.len() as u64);
    [&prefix[..], &body].concat()
}

#[test]
fn only_binary_messages_fed_from_the_input_lend_it_and_what_they_keep_stays() {
    let mut pipe = Pipe::new();
    // What `keep` kept of its attachment (of its params text, in a JSON call), and whether
    // that is a view of the bytes where they lay.
    let kept = Arc::new(Mutex::new(Vec::<(bytes::Bytes, bool)>::new()));
    let keeper = Arc::clone(&kept);
    pipe.procedures.insert(
        "keep",
        Arc::new(move |call: &Call<'_>, reply: &mut Reply<'_>| {
            let params = call.params();
            let bytes = params
                .section()
                .unwrap_or_else(|| params.raw().unwrap_or("").as_bytes());
            let held = crate::lend::keep(bytes);
            let in_place = held.as_ptr() == bytes.as_ptr();
            keeper.lock().expect("not poisoned").push((held, in_place));
            reply.json(&true)
        }),
    );
    let len = 2 * crate::lend::LEND_FROM;
    // Buffered in the input before it is fed (its first bytes came alone).
    let first = keep_call(b'a', len);
    pipe.step(Step::Send(&first[..10]));
    pipe.step(Step::Send(&first[10..]));
    // A JSON call buffered the same way, whose params are as long.
    let json = format!("{}\n", call("keep", &format!("[\"{}\"]", "j".repeat(len)), 2));
    pipe.step(Step::Send(&json.as_bytes()[..10]));
    pipe.step(Step::Send(&json.as_bytes()[10..]));
    // Fed straight from where it arrived (nothing buffered): not the connection's to lend.
    pipe.step(Step::Send(&keep_call(b'c', len)));
    pipe.step(Step::Flush(None));
    assert_eq!(pipe.replies(r#""result":true"#), 3);
    let kept = kept.lock().expect("not poisoned");
    let in_place: Vec<bool> = kept.iter().map(|(_, in_place)| *in_place).collect();
    assert_eq!(in_place, [true, false, false]);
    assert!(
        kept[0].0.iter().all(|&b| b == b'a'),
        "unchanged while the input read on"
    );
    assert_eq!(kept[0].0.len(), len);
    assert!(kept[2].0.iter().all(|&b| b == b'c'));
}

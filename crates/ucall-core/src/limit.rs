// SPDX-License-Identifier: Apache-2.0
//! Rate limits and connection caps: a client that floods is refused at once, before its
//! calls run, so that everyone else keeps their share of the workers.
//!
//! - [`Rate`]: `"100/s"`, `"6000/min"`: so many calls a period, in bursts of up to as
//!   many (a token bucket holding `count` tokens, refilled at `count` a `period`).
//! - [`Limiter`]: the buckets, one per client and limit (the server's, each procedure's),
//!   consulted by `dispatch` before a call runs. A client is told apart by its
//!   [`ClientKey`]: its address (the default; behind a trusted proxy, the address the
//!   proxy forwarded), an API key or bearer token, or a key of the application's.
//! - [`PeerCaps`]: how many connections each peer address holds, checked by the engines
//!   at accept.
//!
//! A bucket is one number, its theoretical arrival time (the generic cell rate algorithm,
//! GCRA): a call is admitted while that time is at most a burst ahead of now, and pushes
//! it on by one interval (`period / count`). The buckets of a client (the server's and
//! each procedure's) share one lock among 64, taken once per call: a client's connections
//! land on any worker, so the table is shared, and 64 locks keep workers apart. A bucket
//! that is full again says nothing a missing one does not, so such buckets are dropped
//! when a table grows past its bound.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::context::Context;
use crate::date::monotonic_nanos;
use crate::jsonrpc::codes::RATE_LIMITED_STATUS;
use crate::jsonrpc::RpcError;

/// So many calls a period: `"100/s"`, `"6000/min"`, `"10/hour"`; bursts of up to `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u32,
    period: Duration,
}

impl Rate {
    /// `count` calls a `period`; `None` when either is zero.
    #[must_use]
    pub fn new(count: u32, period: Duration) -> Option<Rate> {
        (count > 0 && !period.is_zero()).then_some(Rate { count, period })
    }

    /// `count` calls a second; `None` for zero.
    #[must_use]
    pub fn per_second(count: u32) -> Option<Rate> {
        Rate::new(count, Duration::from_secs(1))
    }

    /// The calls allowed each period, and the largest burst.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Nanoseconds between calls at the steady rate, and the burst's tolerance (how far
    /// ahead of now a bucket's time may run: `count - 1` intervals).
    fn gcra(self) -> (u64, u64) {
        let period = u64::try_from(self.period.as_nanos()).unwrap_or(u64::MAX);
        let interval = (period / u64::from(self.count)).max(1);
        (interval, interval.saturating_mul(u64::from(self.count) - 1))
    }
}

impl FromStr for Rate {
    type Err = String;

    /// `"<count>/<unit>"`, the unit one of `s`, `sec`, `second`, `m`, `min`, `minute`,
    /// `h`, `hour`, `d`, `day` (a plural too).
    fn from_str(text: &str) -> Result<Rate, String> {
        let wrong = || format!("rate limit {text:?}: expected <calls>/<unit>, as in \"100/s\" or \"6000/min\"");
        let (count, unit) = text.trim().split_once('/').ok_or_else(wrong)?;
        let count: u32 = count.trim().parse().map_err(|_| wrong())?;
        let unit = unit.trim().to_ascii_lowercase();
        let seconds = match unit.strip_suffix('s').filter(|u| u.len() > 1).unwrap_or(&unit) {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            "d" | "day" => 86_400,
            _ => return Err(wrong()),
        };
        Rate::new(count, Duration::from_secs(seconds))
            .ok_or_else(|| format!("rate limit {text:?}: the count must be at least 1"))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 if self.period.subsec_nanos() == 0 => "s",
            60 if self.period.subsec_nanos() == 0 => "min",
            3600 if self.period.subsec_nanos() == 0 => "h",
            86_400 if self.period.subsec_nanos() == 0 => "d",
            _ => return write!(f, "{}/{}ms", self.count, self.period.as_millis()),
        };
        write!(f, "{}/{unit}", self.count)
    }
}

/// What tells one client from another for the rate limits.
#[derive(Clone, Default)]
pub enum ClientKey {
    /// The peer's IP address (behind a trusted proxy, the client address it forwarded:
    /// [`RateLimit::trusted_proxies`]). The default.
    #[default]
    Peer,
    /// The value of this request header (an API key: `X-API-Key`); a call without it is
    /// keyed by its peer address. Over raw TCP there are no headers.
    Header(String),
    /// The token of `Authorization: Bearer <token>`; a call without one is keyed by its
    /// peer address.
    Bearer,
    /// A key the application computes from the call's context (a middleware's notion of
    /// who calls); `None` keys the call by its peer address.
    Custom(KeyFn),
    /// A key the front end's middleware gives each call (Python's `ctx.limit_by(key)`).
    /// The core does not admit such calls as they arrive: the front end asks
    /// [`Limiter::admit_as`] once its middleware has named the client, so no call is
    /// counted twice. A server with no such front end refuses this key at bind.
    Middleware,
}

/// An application's way to name a call's client ([`ClientKey::Custom`]).
pub type KeyFn = Arc<dyn Fn(&Context<'_>) -> Option<String> + Send + Sync>;

impl ClientKey {
    /// Parse `"peer"`, `"bearer"`, `"header:<name>"` or `"middleware"` (the front ends' spelling).
    ///
    /// # Errors
    /// A message naming the accepted forms.
    pub fn parse(text: &str) -> Result<ClientKey, String> {
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "peer" | "" => Ok(ClientKey::Peer),
            "bearer" => Ok(ClientKey::Bearer),
            "middleware" => Ok(ClientKey::Middleware),
            lower if lower.starts_with("header:") && text.len() > "header:".len() => {
                Ok(ClientKey::Header(text["header:".len()..].trim().to_owned()))
            }
            _ => Err(format!(
                "rate limit key {text:?}: expected \"peer\", \"bearer\", \"header:<name>\" or \"middleware\""
            )),
        }
    }

    /// Whether finding the key needs the request head.
    fn reads_head(&self) -> bool {
        !matches!(self, ClientKey::Peer | ClientKey::Middleware)
    }
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientKey::Peer => f.write_str("Peer"),
            ClientKey::Header(name) => f.debug_tuple("Header").field(name).finish(),
            ClientKey::Bearer => f.write_str("Bearer"),
            ClientKey::Custom(_) => f.write_str("Custom(..)"),
            ClientKey::Middleware => f.write_str("Middleware"),
        }
    }
}

/// An IP address or network (`10.0.0.0/8`, `::1`): a proxy trusted to say who its client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Whether `ip` lies in this network (an IPv4 address mapped into IPv6 counts as IPv4).
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = String;

    fn from_str(text: &str) -> Result<IpNet, String> {
        let wrong = || format!("trusted proxy {text:?}: expected an IP address or network, as in \"10.0.0.0/8\"");
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix.parse::<u8>().map_err(|_| wrong())?)),
            None => (text.trim(), None),
        };
        let addr = canonical(addr.parse::<IpAddr>().map_err(|_| wrong())?);
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        if prefix > bits {
            return Err(wrong());
        }
        Ok(IpNet { addr, prefix })
    }
}

/// An IPv4 address mapped into IPv6 as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The server's rate limit: how many calls each client may make, and how clients are told
/// apart. Each procedure may have a limit of its own besides
/// ([`crate::ServerBuilder::rate_limit`]); a call must fit in both.
#[derive(Debug, Clone)]
pub struct RateLimit {
    /// Calls each client may make, over all procedures. `None` (default): no server-wide limit.
    pub rate: Option<Rate>,
    /// What tells clients apart. Default: the peer address.
    pub key: ClientKey,
    /// Proxies whose `X-Forwarded-For` is believed: a call from one of them is keyed by
    /// the address the proxies forwarded (the rightmost one that is not itself a trusted
    /// proxy). Default none: the peer address is the client's.
    pub trusted_proxies: Vec<IpNet>,
    /// Most clients whose buckets are kept (a bound on memory). When that many are all
    /// active, any further client shares one bucket with the others past the bound.
    /// Default 100,000 (about 6 MB).
    pub max_clients: usize,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            rate: None,
            key: ClientKey::Peer,
            trusted_proxies: Vec::new(),
            max_clients: 100_000,
        }
    }
}

/// How many locks the buckets are spread over.
const SHARDS: usize = 64;

/// The buckets of one shard: by (client's hash, limit: 0 the server's, `slot + 1` a
/// procedure's), each bucket's theoretical arrival time in monotonic nanoseconds.
type Buckets = FxHashMap<(u64, u32), u64>;

/// The rate limits in force while serving: the buckets of every client.
pub struct Limiter {
    server: Option<Rate>,
    /// Each procedure's own limit, by slot.
    methods: Box<[Option<Rate>]>,
    key: ClientKey,
    trusted: Vec<IpNet>,
    /// Keyed at random per process, so that no client can aim its keys at one bucket.
    hasher: RandomState,
    shards: Box<[Mutex<Buckets>]>,
    max_per_shard: usize,
}

/// A call over its limit: when a retry may pass, and the limit it went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// How long until the client's bucket holds a call again.
    pub retry_after: Duration,
    /// The limit the call went over.
    pub rate: Rate,
}

impl Refused {
    /// The error the caller gets: HTTP 429 with `Retry-After` (whole seconds, at least
    /// one), code -32029, and `data` saying the call did not run and when to retry.
    #[must_use]
    pub fn error(&self) -> RpcError {
        let millis = u64::try_from(self.retry_after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let seconds = u16::try_from(millis.div_ceil(1000).max(1)).unwrap_or(u16::MAX);
        RpcError::http(
            RATE_LIMITED_STATUS,
            format!(
                "Too many requests: over the rate limit of {}; retry in {millis} ms",
                self.rate
            ),
        )
        .with_retry_after(seconds)
        .with_data(&serde_json::json!({
            "executed": false,
            "retry_after_ms": millis,
            "limit": self.rate.to_string(),
        }))
    }
}

impl Limiter {
    /// The limits `config` sets for the server and `methods` for each procedure (by
    /// slot); `None` when neither sets any.
    #[must_use]
    pub fn new(config: &RateLimit, methods: Vec<Option<Rate>>) -> Option<Limiter> {
        if config.rate.is_none() && methods.iter().all(Option::is_none) {
            return None;
        }
        Some(Limiter {
            server: config.rate,
            methods: methods.into_boxed_slice(),
            key: config.key.clone(),
            trusted: config.trusted_proxies.clone(),
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(Buckets::default())).collect(),
            max_per_shard: (config.max_clients / SHARDS).max(16),
        })
    }

    /// Whether telling clients apart needs each call's request head.
    #[must_use]
    pub fn reads_head(&self) -> bool {
        self.key.reads_head() || !self.trusted.is_empty()
    }

    /// Admit a call to the procedure in `slot` from the client `context` names, taking a
    /// token from each bucket that applies; or refuse it, taking none.
    ///
    /// # Errors
    /// [`Refused`] when a bucket is empty.
    pub fn admit(&self, slot: u32, context: &Context<'_>) -> Result<(), Refused> {
        self.admit_client(slot, || self.client_hash(context))
    }

    /// As [`Limiter::admit`], for the client `key` names (a middleware's key); `None`
    /// keys the call by its address, as [`ClientKey::Peer`] does.
    ///
    /// # Errors
    /// [`Refused`] when a bucket is empty.
    pub fn admit_as(&self, slot: u32, key: Option<&str>, context: &Context<'_>) -> Result<(), Refused> {
        self.admit_client(slot, || match key {
            Some(key) => self.hasher.hash_one((1u8, key.as_bytes())).max(1),
            None => self.hasher.hash_one((0u8, self.client_address(context))).max(1),
        })
    }

    fn admit_client(&self, slot: u32, client: impl FnOnce() -> u64) -> Result<(), Refused> {
        let own = self.methods.get(slot as usize).copied().flatten();
        if own.is_none() && self.server.is_none() {
            return Ok(());
        }
        let client = client();
        let now = monotonic_nanos();
        let mut shard = lock(&self.shards[(client % SHARDS as u64) as usize]);
        let limits = [(0, self.server), (slot + 1, own)];
        let known = |shard: &Buckets| limits.iter().any(|(limit, _)| shard.contains_key(&(client, *limit)));
        let mut client = client;
        if shard.len() + 2 > self.max_per_shard && !known(&shard) {
            // Full buckets (due by now) are as good as none.
            shard.retain(|_, due| *due > now);
            if shard.len() + 2 > self.max_per_shard {
                client = 0; // the clients past the bound share a bucket
            }
        }
        let mut refused: Option<Refused> = None;
        for (limit, rate) in limits {
            let Some(rate) = rate else { continue };
            let (_, tolerance) = rate.gcra();
            let due = shard.get(&(client, limit)).copied().unwrap_or(now).max(now);
            if due - now > tolerance {
                let retry_after = Duration::from_nanos(due - now - tolerance);
                if refused.is_none_or(|earlier| earlier.retry_after < retry_after) {
                    refused = Some(Refused { retry_after, rate });
                }
            }
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        for (limit, rate) in limits {
            let Some(rate) = rate else { continue };
            let (interval, _) = rate.gcra();
            let due = shard.entry((client, limit)).or_insert(now);
            *due = (*due).max(now) + interval;
        }
        Ok(())
    }

    /// The hash of the client `context` names (never 0, which the clients past the bound share).
    fn client_hash(&self, context: &Context<'_>) -> u64 {
        let named = match &self.key {
            ClientKey::Peer | ClientKey::Middleware => None,
            ClientKey::Header(name) => context.header(name).filter(|value| !value.is_empty()),
            ClientKey::Bearer => context.header("authorization").and_then(bearer_token),
            ClientKey::Custom(key) => {
                if let Some(key) = key(context) {
                    return self.hasher.hash_one((1u8, key.as_bytes())).max(1);
                }
                None
            }
        };
        match named {
            Some(key) => self.hasher.hash_one((1u8, key)).max(1),
            None => self.hasher.hash_one((0u8, self.client_address(context))).max(1),
        }
    }

    /// The client's address: the peer's, or, from a trusted proxy, the rightmost address
    /// of `X-Forwarded-For` that is not a trusted proxy itself.
    fn client_address(&self, context: &Context<'_>) -> Option<IpAddr> {
        let peer = context.peer().map(|peer: SocketAddr| canonical(peer.ip()));
        let trusted = |ip: IpAddr| self.trusted.iter().any(|net| net.contains(ip));
        if !peer.is_some_and(trusted) {
            return peer;
        }
        let Some(forwarded) = context.header("x-forwarded-for") else {
            return peer;
        };
        let mut client = peer;
        for hop in forwarded.rsplit(|&c| c == b',') {
            let Some(ip) = std::str::from_utf8(hop).ok().and_then(|hop| hop.trim().parse().ok()) else {
                break; // not an address: believe nothing further left
            };
            client = Some(canonical(ip));
            if !trusted(canonical(ip)) {
                break;
            }
        }
        client
    }
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer "))
        .then(|| token.trim_ascii())
        .filter(|t| !t.is_empty())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The tables hold plain numbers: a panic elsewhere leaves them usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connections each peer address holds, against `max_connections_per_peer`.
pub struct PeerCaps {
    max: usize,
    shards: Box<[Mutex<FxHashMap<IpAddr, usize>>]>,
}

impl PeerCaps {
    /// A cap of `max` connections per peer address.
    #[must_use]
    pub fn new(max: usize) -> Arc<PeerCaps> {
        Arc::new(PeerCaps {
            max,
            shards: (0..SHARDS).map(|_| Mutex::new(FxHashMap::default())).collect(),
        })
    }

    /// Count a connection from `peer`; `None` when the peer holds `max` already. The
    /// connection holds the slot until it drops it.
    #[must_use]
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<PeerSlot> {
        let peer = canonical(peer);
        let mut shard = lock(self.shard(peer));
        let open = shard.entry(peer).or_insert(0);
        if *open >= self.max {
            return None;
        }
        *open += 1;
        Some(PeerSlot {
            caps: Arc::clone(self),
            peer,
        })
    }

    /// The connections `peer` holds now.
    #[must_use]
    pub fn open(&self, peer: IpAddr) -> usize {
        let peer = canonical(peer);
        lock(self.shard(peer)).get(&peer).copied().unwrap_or(0)
    }

    fn shard(&self, peer: IpAddr) -> &Mutex<FxHashMap<IpAddr, usize>> {
        let hash = rustc_hash::FxBuildHasher.hash_one(peer);
        &self.shards[(hash % SHARDS as u64) as usize]
    }
}

/// A connection's place in its peer's count ([`PeerCaps::admit`]); given back on drop.
pub struct PeerSlot {
    caps: Arc<PeerCaps>,
    peer: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut shard = lock(self.caps.shard(self.peer));
        if let Some(open) = shard.get_mut(&self.peer) {
            *open -= 1;
            if *open == 0 {
                shard.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Transport;

    #[test]
    fn rates_parse_as_documented() {
        let rate: Rate = "100/s".parse().unwrap();
        assert_eq!((rate.count(), rate.period()), (100, Duration::from_secs(1)));
        let rate: Rate = " 6000 / min ".parse().unwrap();
        assert_eq!((rate.count(), rate.period()), (6000, Duration::from_secs(60)));
        assert_eq!("10/hours".parse::<Rate>().unwrap().period(), Duration::from_secs(3600));
        assert_eq!("5/second".parse::<Rate>().unwrap().to_string(), "5/s");
        assert_eq!("6000/minute".parse::<Rate>().unwrap().to_string(), "6000/min");
        for wrong in [
            "",
            "100",
            "100/",
            "/s",
            "0/s",
            "-1/s",
            "1.5/s",
            "100/fortnight",
            "100/ss",
        ] {
            assert!(wrong.parse::<Rate>().is_err(), "{wrong:?} parsed");
        }
        assert!("0/s".parse::<Rate>().unwrap_err().contains("at least 1"));
    }

    #[test]
    fn networks_contain_their_addresses() {
        let net: IpNet = "10.213.0.0/16".parse().unwrap();
        assert!(net.contains("10.213.4.5".parse().unwrap()));
        assert!(net.contains("::ffff:10.213.4.5".parse().unwrap()));
        assert!(!net.contains("10.214.0.1".parse().unwrap()));
        let one: IpNet = "::1".parse().unwrap();
        assert!(one.contains("::1".parse().unwrap()) && !one.contains("::2".parse().unwrap()));
        assert!("0.0.0.0/0"
            .parse::<IpNet>()
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for wrong in ["10.0.0.0/33", "nope", "10.0.0.0/x"] {
            assert!(wrong.parse::<IpNet>().is_err(), "{wrong:?} parsed");
        }
    }

    fn context_from<'a>(peer: &str, head: &'a [u8]) -> Context<'a> {
        Context::new(Transport::Http, false, Some(peer.parse().unwrap()), head)
    }

    #[test]
    fn a_client_gets_its_burst_then_waits_its_interval() {
        let config = RateLimit {
            rate: Some("5/s".parse().unwrap()),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![None]).unwrap();
        let alice = context_from("192.0.2.1:1000", b"");
        let bob = context_from("192.0.2.2:1000", b"");
        for _ in 0..5 {
            limiter.admit(0, &alice).unwrap();
        }
        let refused = limiter.admit(0, &alice).unwrap_err();
        assert!(refused.retry_after <= Duration::from_millis(200), "{refused:?}");
        assert!(refused.retry_after > Duration::from_millis(150), "{refused:?}");
        // Another port of the same address is the same client; another address is not.
        assert!(limiter.admit(0, &context_from("192.0.2.1:2000", b"")).is_err());
        limiter.admit(0, &bob).unwrap();
        std::thread::sleep(refused.retry_after);
        limiter.admit(0, &alice).unwrap();
        assert!(limiter.admit(0, &alice).is_err());
    }

    #[test]
    fn a_procedure_limit_and_the_server_limit_both_apply() {
        let config = RateLimit {
            rate: Some("4/min".parse().unwrap()),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![Some("2/min".parse().unwrap()), None]).unwrap();
        let client = context_from("192.0.2.1:1", b"");
        limiter.admit(0, &client).unwrap();
        limiter.admit(0, &client).unwrap();
        let refused = limiter.admit(0, &client).unwrap_err();
        assert_eq!(refused.rate.to_string(), "2/min");
        // The refusal took no token from the server's bucket: two more fit elsewhere.
        limiter.admit(1, &client).unwrap();
        limiter.admit(1, &client).unwrap();
        assert_eq!(limiter.admit(1, &client).unwrap_err().rate.to_string(), "4/min");
    }

    #[test]
    fn keys_come_from_headers_tokens_and_trusted_proxies() {
        let config = RateLimit {
            rate: Some("1/min".parse().unwrap()),
            key: ClientKey::Bearer,
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![None]).unwrap();
        let head_a = b"POST / HTTP/1.1\r\nAuthorization: Bearer aaa\r\n\r\n";
        let head_b = b"POST / HTTP/1.1\r\nauthorization: bearer bbb\r\n\r\n";
        limiter.admit(0, &context_from("192.0.2.1:1", head_a)).unwrap();
        limiter.admit(0, &context_from("192.0.2.1:1", head_b)).unwrap();
        assert!(
            limiter.admit(0, &context_from("192.0.2.9:1", head_a)).is_err(),
            "same token"
        );
        limiter.admit(0, &context_from("192.0.2.1:1", b"")).unwrap(); // no token: the address

        let config = RateLimit {
            rate: Some("1/min".parse().unwrap()),
            trusted_proxies: vec!["10.213.0.0/16".parse().unwrap()],
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![None]).unwrap();
        let via = |forwarded: &str| format!("GET / HTTP/1.1\r\nX-Forwarded-For: {forwarded}\r\n\r\n");
        let first = via("203.0.113.7, 10.213.1.1");
        limiter
            .admit(0, &context_from("10.213.0.1:1", first.as_bytes()))
            .unwrap();
        let second = via("203.0.113.8");
        limiter
            .admit(0, &context_from("10.213.0.1:1", second.as_bytes()))
            .unwrap();
        let again = via("198.51.100.1, 203.0.113.7");
        assert!(limiter
            .admit(0, &context_from("10.213.0.2:1", again.as_bytes()))
            .is_err());
        // An untrusted peer's header is not believed: it is keyed by its own address.
        let spoofed = via("203.0.113.99");
        limiter
            .admit(0, &context_from("192.0.2.50:1", spoofed.as_bytes()))
            .unwrap();
        assert!(limiter.admit(0, &context_from("192.0.2.50:1", b"")).is_err());
    }

    #[test]
    fn an_application_key_names_the_client() {
        // A tenant header the application trusts, say; without it, the address.
        let tenant: KeyFn = Arc::new(|context: &Context<'_>| {
            let value = context.header("x-tenant")?;
            Some(format!("tenant:{}", String::from_utf8_lossy(value)))
        });
        let config = RateLimit {
            rate: Some("1/min".parse().unwrap()),
            key: ClientKey::Custom(tenant),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![None]).unwrap();
        let acme = b"POST / HTTP/1.1\r\nX-Tenant: acme\r\n\r\n";
        let initech = b"POST / HTTP/1.1\r\nX-Tenant: initech\r\n\r\n";
        limiter.admit(0, &context_from("192.0.2.1:1", acme)).unwrap();
        limiter.admit(0, &context_from("192.0.2.1:1", initech)).unwrap();
        assert!(
            limiter.admit(0, &context_from("192.0.2.7:1", acme)).is_err(),
            "one tenant, two addresses"
        );
        limiter.admit(0, &context_from("192.0.2.1:1", b"")).unwrap();
        assert!(
            limiter.admit(0, &context_from("192.0.2.1:2", b"")).is_err(),
            "no tenant: the address"
        );
        assert_eq!(format!("{:?}", config.key), "Custom(..)");
    }

    #[test]
    fn a_middleware_key_names_the_client_it_is_given() {
        let config = RateLimit {
            rate: Some("1/min".parse().unwrap()),
            key: ClientKey::parse("middleware").unwrap(),
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![None]).unwrap();
        let here = context_from("192.0.2.1:1", b"");
        limiter.admit_as(0, Some("acme"), &here).unwrap();
        limiter.admit_as(0, Some("initech"), &here).unwrap();
        let elsewhere = context_from("192.0.2.7:1", b"");
        assert!(
            limiter.admit_as(0, Some("acme"), &elsewhere).is_err(),
            "one key, two addresses"
        );
        limiter.admit_as(0, None, &here).unwrap();
        assert!(
            limiter.admit_as(0, None, &context_from("192.0.2.1:2", b"")).is_err(),
            "no key: the address"
        );
        assert!(!limiter.reads_head());
        assert_eq!(format!("{:?}", config.key), "Middleware");
    }

    #[test]
    fn the_table_stays_bounded_under_many_clients() {
        let config = RateLimit {
            rate: Some("1/min".parse().unwrap()),
            max_clients: 1,
            ..RateLimit::default()
        };
        let limiter = Limiter::new(&config, vec![None]).unwrap();
        let mut refused = 0;
        for i in 0..5000u32 {
            let peer = SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + i), 1));
            let context = Context::new(Transport::Tcp, false, Some(peer), b"");
            refused += usize::from(limiter.admit(0, &context).is_err());
        }
        let kept: usize = limiter.shards.iter().map(|shard| lock(shard).len()).sum();
        assert!(kept <= SHARDS * limiter.max_per_shard, "{kept} buckets kept");
        assert!(refused > 0, "the clients past the bound share a bucket");
    }

    #[test]
    fn peer_caps_count_and_give_back() {
        let caps = PeerCaps::new(2);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let first = caps.admit(ip).unwrap();
        let _second = caps.admit("::ffff:192.0.2.1".parse().unwrap()).unwrap();
        assert!(caps.admit(ip).is_none());
        assert!(caps.admit("192.0.2.2".parse().unwrap()).is_some());
        drop(first);
        assert_eq!(caps.open(ip), 1);
        assert!(caps.admit(ip).is_some());
    }

    #[test]
    fn a_refusal_says_when_to_retry_and_that_nothing_ran() {
        let refused = Refused {
            retry_after: Duration::from_micros(2_500),
            rate: "100/s".parse().unwrap(),
        };
        let error = refused.error();
        assert_eq!(
            (error.code(), error.http_status(), error.retry_after()),
            (-32029, Some(429), Some(1))
        );
        let data: serde_json::Value = serde_json::from_str(error.data().unwrap()).unwrap();
        assert_eq!(
            data,
            serde_json::json!({"executed": false, "retry_after_ms": 3, "limit": "100/s"})
        );
    }
}

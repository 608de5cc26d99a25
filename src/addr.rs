//! Host and port names: `host[:port]` parsing (IPv6 in brackets), joining, resolving, and the
//! address this host advertises. Used by the metadata, etcd and engine layers alike.

use crate::error::{ErrorKind, Result, fail};

/// Splits `host[:port]` (IPv6 in brackets) into host and port, with `default_port` when absent.
pub fn parse_host_port(name: &str, default_port: u16) -> Result<(String, u16)> {
    let name = name.trim();
    if name.is_empty() {
        return fail(ErrorKind::InvalidArgument, "empty host name");
    }
    if let Some(rest) = name.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return fail(
                ErrorKind::InvalidArgument,
                format!("unterminated '[' in {name:?}"),
            );
        };
        let port = match after.strip_prefix(':') {
            Some(p) => parse_port(p, name)?,
            None if after.is_empty() => default_port,
            None => {
                return fail(
                    ErrorKind::InvalidArgument,
                    format!("junk after ']' in {name:?}"),
                );
            }
        };
        return Ok((host.to_string(), port));
    }
    match name.rsplit_once(':') {
        // More than one ':' without brackets: a bare IPv6 address.
        Some((h, _)) if h.contains(':') => Ok((name.to_string(), default_port)),
        Some((h, p)) if !h.is_empty() => Ok((h.to_string(), parse_port(p, name)?)),
        Some(_) => fail(ErrorKind::InvalidArgument, format!("no host in {name:?}")),
        None => Ok((name.to_string(), default_port)),
    }
}

fn parse_port(p: &str, name: &str) -> Result<u16> {
    p.parse::<u16>().map_err(|_| {
        crate::error::Error::new(ErrorKind::InvalidArgument, format!("bad port in {name:?}"))
    })
}

/// Formats host and port as a segment name (`[v6]:port` for IPv6).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The first up, non-loopback IPv4 address of this host (Mooncake's choice of RPC address in
/// metadata-server mode), if any.
pub fn first_lan_ipv4() -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() && found.is_none() {
        // SAFETY: `cur` is a node of the list returned by getifaddrs, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        let flags = ifa.ifa_flags as libc::c_int;
        let usable = flags & libc::IFF_UP != 0
            && flags & libc::IFF_RUNNING != 0
            && flags & libc::IFF_LOOPBACK == 0;
        // SAFETY: a non-NULL ifa_addr points at a sockaddr whose family says its real type.
        let family = (!ifa.ifa_addr.is_null()).then(|| unsafe { (*ifa.ifa_addr).sa_family });
        if usable && family.map(i32::from) == Some(libc::AF_INET) {
            // SAFETY: the family is AF_INET, so this is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).to_string());
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// Resolves `host:port` to socket addresses (IPv4 first).
pub fn resolve(host: &str, port: u16) -> Result<Vec<std::net::SocketAddr>> {
    use std::net::ToSocketAddrs;
    let mut addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            crate::error::Error::new(
                ErrorKind::UnknownSegment,
                format!("cannot resolve {host:?}: {e}"),
            )
        })?
        .collect();
    addrs.sort_by_key(|a| a.is_ipv6());
    if addrs.is_empty() {
        return fail(
            ErrorKind::UnknownSegment,
            format!("{host:?} resolves to nothing"),
        );
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_parsing() {
        assert_eq!(
            parse_host_port("127.0.0.1:15001", 1).unwrap(),
            ("127.0.0.1".into(), 15001)
        );
        assert_eq!(
            parse_host_port("node", 12001).unwrap(),
            ("node".into(), 12001)
        );
        assert_eq!(parse_host_port("[::1]:80", 1).unwrap(), ("::1".into(), 80));
        assert_eq!(parse_host_port("[::1]", 7).unwrap(), ("::1".into(), 7));
        assert_eq!(
            parse_host_port("fe80::1", 7).unwrap(),
            ("fe80::1".into(), 7)
        );
        for bad in ["", ":80", "h:99999", "h:x", "[::1", "[::1]x"] {
            assert!(parse_host_port(bad, 1).is_err(), "{bad:?}");
        }
        assert_eq!(join_host_port("::1", 5), "[::1]:5");
        assert_eq!(join_host_port("h", 5), "h:5");
    }
}

"""The one check every client runs before sending a byte: a server URL on this machine, as one loopback address.

`check_url(text, flag)` parses the URL once and refuses, with an InputError naming the flag:
- anything but `http://`; backslashes, whitespace, control characters, `%` or a query/fragment anywhere;
- credentials: any `@` in the authority (`user:pass@host`, `a\\@b`);
- an empty host; a port that is empty, not decimal digits, 0 or above 65535;
- IP literals that are not in their one canonical form (`127.1`, `0177.0.0.1`, `2130706433`, `0x7f.0.0.1`,
  `127.0.0.1.`), IPv6 zone ids and IPv4-mapped/-compatible IPv6 forms (`[::ffff:127.0.0.1]`);
- a host name whose every resolved address (looked up with a bounded wait) is not loopback (127.0.0.0/8, ::1).

What comes back is a `Target`: the resolved loopback address as a literal, the port and the base path, and its
`url` in canonical form (`http://127.0.0.1:8011`, `http://[::1]:8011/base`). Connections are made to that address
only, and it is what other clients (the Node driver) are handed: never the text the user typed, so no other parser
of that text can reach a different host. The Node driver checks the canonical form again on its side.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import re
import socket
from dataclasses import dataclass

from simlab.errors import InputError

RESOLVE_SECONDS = 5.0  # a host name's lookup; a loopback name resolves from /etc/hosts in microseconds
_FORBIDDEN = re.compile(r"[\\%@\s\x00-\x1f\x7f]")
_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:-]+)*/?")
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_NUMERIC = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?")  # forms inet_aton reads as an address


@dataclass(frozen=True)
class Target:
    """A checked server: a loopback IP literal, a port, a base path ('' or '/a/b')."""

    address: str
    port: int
    path: str

    @property
    def family(self) -> int:
        return socket.AF_INET6 if ":" in self.address else socket.AF_INET

    @property
    def netloc(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.netloc}{self.path}"

    def __str__(self) -> str:
        return self.url


def check_url(text, flag: str = "--url", resolve_seconds: float = RESOLVE_SECONDS) -> Target:
    """The Target of `text`, or an InputError naming `flag` and what is wrong (see the module's docstring)."""

    def refuse(what: str):
        raise InputError(None, flag, f"{what} (found {text!r}); expected http://HOST:PORT of a server on this "
                         "machine, e.g. http://127.0.0.1:8011")

    if not isinstance(text, str) or not text:
        refuse("no URL")
    if len(text) > 2048:
        refuse("longer than 2048 characters")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() != "http":
        refuse("only http:// URLs are accepted")
    bad = _FORBIDDEN.search(text)
    if bad:
        what = {"\\": "a backslash", "@": "credentials or an '@'", "%": "a '%' escape"}.get(
            bad.group(), "whitespace or a control character")
        refuse(f"{what} in the URL is refused")
    if "?" in rest or "#" in rest:
        refuse("a query or fragment is refused in a server's base URL")
    authority, _, path = rest.partition("/")
    path = "/" + path if path or rest.endswith("/") else ""
    host, port = _split_authority(authority, refuse)
    if not _PATH.fullmatch(path) or any(seg in (".", "..") for seg in path.split("/")):
        refuse("the path may hold only letters, digits and - . _ ~ ! $ & ' ( ) * + , ; = : between slashes, "
               "without . or .. segments")
    address = _loopback_address(host, refuse, resolve_seconds)
    return Target(address, port, path.rstrip("/"))


def _split_authority(authority: str, refuse) -> tuple[str, int]:
    if authority.startswith("["):
        host, close, after = authority[1:].partition("]")
        if not close:
            refuse("an IPv6 address without its closing ']'")
        host = "[" + host + "]"
        if after and not after.startswith(":"):
            refuse("something other than ':PORT' after the IPv6 address")
        port_text = after[1:] if after else None
    else:
        host, colon, port_text = authority.partition(":")
        if not colon:
            port_text = None
        elif ":" in port_text:
            refuse("more than one ':' in the host and port (an IPv6 address goes in brackets)")
    if not host or host == "[]":
        refuse("no host")
    if port_text is None:
        return host, 80
    if not port_text:
        refuse("an empty port after ':'")
    if not port_text.isascii() or not port_text.isdigit():
        refuse(f"the port {port_text!r} is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        refuse(f"the port {port} is out of range (1-65535)")
    return host, port


def _loopback_address(host: str, refuse, resolve_seconds: float) -> str:
    """The one loopback address literal the host stands for."""
    if host.startswith("["):
        try:
            ip = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            refuse(f"{host} is not an IPv6 address")
        if ip.ipv4_mapped is not None or (ip.packed[:12] == bytes(12) and int(ip) > 1) or ip.sixtofour is not None:
            refuse(f"{host} embeds an IPv4 address; write that address itself (e.g. 127.0.0.1)")
        if not ip.is_loopback:
            refuse(f"{host} is not a loopback address (only [::1] and 127.0.0.0/8 are)")
        return str(ip)
    name = host.lower()
    if _NUMERIC.fullmatch(name):
        try:
            ip4 = ipaddress.IPv4Address(name)  # the canonical dotted quad only: no octal, hex, short or decimal forms
        except ValueError:
            refuse(f"the host {host!r} is a numeric address not written as a dotted quad (e.g. 127.0.0.1)")
        if not ip4.is_loopback:
            refuse(f"refusing to send load to {host}: only loopback addresses (127.0.0.0/8, [::1]) are allowed")
        return str(ip4)
    if not _NAME.fullmatch(name):
        refuse(f"the host {host!r} is not a valid host name" + (" (no trailing '.')" if name.endswith(".") else ""))
    addresses = _resolve(name, refuse, resolve_seconds)
    outside = sorted({a for a in addresses if not ipaddress.ip_address(a).is_loopback})
    if outside:
        refuse(f"refusing to send load to {host}: it resolves to {', '.join(outside)}, not only to loopback "
               "addresses (127.0.0.0/8, [::1])")
    return min(addresses, key=lambda a: (":" in a, a))  # IPv4 first: the usual listening address


def _resolve(name: str, refuse, seconds: float) -> list[str]:
    """Every address `name` resolves to, waiting at most `seconds` (getaddrinfo itself cannot be interrupted: it
    runs on a helper thread that is left to finish alone)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        job = pool.submit(socket.getaddrinfo, name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        infos = job.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        refuse(f"looking up the host {name!r} took more than {seconds:g} s")
    except (OSError, UnicodeError) as exc:
        refuse(f"the host {name!r} does not resolve ({getattr(exc, 'strerror', None) or exc})")
    finally:
        pool.shutdown(wait=False)
    addresses = sorted({info[4][0].split("%")[0] for info in infos})
    if not addresses:
        refuse(f"the host {name!r} resolves to no address")
    return addresses

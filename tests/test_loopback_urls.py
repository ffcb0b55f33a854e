"""Load goes only to the checked loopback address: one URL check (simlab.realcheck.urls) for every client.

Listeners on 127.0.0.2 stand for a host the check never saw; a listener on 127.0.0.1 is the checked one. Every
tricky form is sent through `simlab loadtest`, `simlab validate-real` (with and without the article's scheduler
under Node), the client's own check, and real_server.js itself: each is refused with exit 2 naming the flag and
what is wrong, and 127.0.0.2 sees no connection at all. Two controls show the listeners do count."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from misbehaving import serve
from simlab.cli import main
from simlab.errors import InputError
from simlab.realcheck.urls import Target, check_url
from tests.helpers import ROOT

NODE = shutil.which("node")


@pytest.fixture(scope="module")
def listeners():
    """(P, Q, the 127.0.0.2 server, the 127.0.0.1 server): both only count connections and answer 503."""
    other_url, other, stop_other = serve("count", "127.0.0.2")
    checked_url, checked, stop_checked = serve("count", "127.0.0.1")
    yield int(other_url.rsplit(":", 1)[1]), int(checked_url.rsplit(":", 1)[1]), other, checked
    stop_other()
    stop_checked()


def tricky(p: int, q: int) -> dict[str, str]:
    """URL -> the words the refusal must contain."""
    return {
        f"http://127.0.0.2:{p}\\@127.0.0.1:{q}": "a backslash",
        f"http://127.0.0.2:{p}\\\\@127.0.0.1:{q}": "a backslash",
        f"http://u:p@127.0.0.1:{q}": "credentials",
        f"http://127.0.0.2:{p}@127.0.0.1:{q}": "credentials",
        f"http://127.0.0.1:{q}@127.0.0.2:{p}": "credentials",
        f"http://127.0.0.1:{q}#@127.0.0.2:{p}": "credentials",
        f"http://127.0.0.1:{q}/#127.0.0.2:{p}": "a query or fragment",
        f"http://127.0.0.1:{q}?@127.0.0.2:{p}": "credentials",
        f"http://127.0.0.2:{p}%2f@127.0.0.1:{q}": "a '%' escape",
        f"http://127.0.0.2:{p}\t/@127.0.0.1:{q}": "whitespace",
        f"http://127.attacker.example:{q}": "does not resolve",
        "http://127.0.0.1:0": "out of range",
        "http://127.0.0.1:99999": "out of range",
        "http://127.0.0.1:abc": "is not a number",
        "http://127.0.0.1:": "an empty port",
        f"http://127.0.0.1:+{q}": "is not a number",
        f"http://:{q}": "no host",
        f"https://127.0.0.1:{q}": "only http://",
        f"http://[::ffff:127.0.0.2]:{p}": "embeds an IPv4 address",
        f"http://[::ffff:7f00:2]:{p}": "embeds an IPv4 address",
        f"http://[::127.0.0.2]:{p}": "embeds an IPv4 address",
        f"http://127.0.0.2.:{p}": "not written as a dotted quad",
        f"http://127.0.0.1.:{q}": "not written as a dotted quad",
        f"http://2130706434:{p}": "not written as a dotted quad",
        f"http://0177.0.0.2:{p}": "not written as a dotted quad",
        f"http://0x7f.0.0.2:{p}": "not written as a dotted quad",
        f"http://127.2:{p}": "not written as a dotted quad",
        f"http://10.0.0.2:{p}": "only loopback addresses",
    }


def test_the_check_refuses_every_tricky_form(listeners):
    p, q, other, checked = listeners
    for url, words in tricky(p, q).items():
        with pytest.raises(InputError) as info:
            check_url(url, "--url")
        assert info.value.where == "--url" and words in info.value.message, (url, info.value.message)
    assert other.connections == 0 and checked.connections == 0  # checking connects to nothing


def test_the_check_gives_one_canonical_loopback_target():
    assert check_url("http://127.0.0.1:8011") == Target("127.0.0.1", 8011, "")
    assert check_url("HTTP://LocalHost:8011/") == Target("127.0.0.1", 8011, "")  # /etc/hosts: loopback only
    assert check_url("http://[::1]:9/base/").url == "http://[::1]:9/base"
    assert check_url("http://127.0.0.1").url == "http://127.0.0.1:80"


@pytest.mark.parametrize("command", ["loadtest", "validate-real", "validate-real --node-policies adaptive"])
def test_no_command_connects_anywhere_else(listeners, command, tmp_path, capsys):
    p, q, other, checked = listeners
    flag = "URL" if command == "loadtest" else "--url"
    for url, words in tricky(p, q).items():
        if command == "loadtest":
            args = ["loadtest", url, "--max-seconds", "3", "--out", str(tmp_path / "lt")]
        else:
            args = ["validate-real", str(ROOT / "scenarios" / "real-engine.toml"), "--url", url, "--max-seconds", "3",
                    "--repeats", "1", "--out", str(tmp_path / "vr"), *command.split()[1:]]
        assert main(args) == 2, url
        err = capsys.readouterr().err
        assert err.startswith(f"error: {flag}: ") and words in err, (url, err)
    assert other.connections == 0 and checked.connections == 0


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
def test_the_node_driver_checks_the_same_rules(listeners, tmp_path):
    """real_server.js refuses, on its own, every form that is not a canonical loopback address literal."""
    p, q, other, checked = listeners
    (tmp_path / "options.json").write_text(json.dumps({"policy": "static", "maxConcurrency": 2,
                                                        "batchMaxConcurrency": 1}))
    (tmp_path / "tasks.csv").write_text("id,kind,arrival_ms,prompt_tokens,output_tokens\n1,interactive,0,8,4\n")
    forms = list(tricky(p, q)) + [f"http://localhost:{q}", f"http://127.1:{q}", f"http://127.0.0.1:{q}/",
                                  "http://127.0.0.1", f"http://[::ffff:127.0.0.1]:{q}", f"http://127.0.0.1:{q}/a/../b"]
    for url in forms:
        proc = subprocess.run([NODE, ROOT / "tests" / "conformance" / "real_server.js", url, tmp_path / "options.json",
                               tmp_path / "tasks.csv", tmp_path / "out.csv", "3"], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 2 and "refusing" in proc.stderr, (url, proc.returncode, proc.stderr)
    assert other.connections == 0 and checked.connections == 0


def test_controls_the_listeners_count(listeners, tmp_path, capsys):
    """The checked address is reached (the listener answers 503: exit 2 naming the response), and 127.0.0.2 is a
    loopback address too, reached when it is the URL's own host: so the zero counts above mean something."""
    p, q, other, checked = listeners
    before = (other.connections, checked.connections)
    assert main(["loadtest", f"http://127.0.0.1:{q}", "--max-seconds", "3", "--out", str(tmp_path / "lt")]) == 2
    assert "error: server http://127.0.0.1:" in capsys.readouterr().err
    assert main(["loadtest", f"http://127.0.0.2:{p}", "--max-seconds", "3", "--out", str(tmp_path / "lt")]) == 2
    assert "error: server http://127.0.0.2:" in capsys.readouterr().err
    assert other.connections > before[0] and checked.connections > before[1]
    before = (other.connections, checked.connections)
    if NODE is not None:  # Node, handed the canonical URL, reaches it too
        (tmp_path / "options.json").write_text(json.dumps({"policy": "unscheduled"}))
        (tmp_path / "tasks.csv").write_text("id,kind,arrival_ms,prompt_tokens,output_tokens\n1,interactive,0,8,4\n")
        proc = subprocess.run([NODE, ROOT / "tests" / "conformance" / "real_server.js", f"http://127.0.0.1:{q}",
                               tmp_path / "options.json", tmp_path / "tasks.csv", tmp_path / "out.csv", "3"],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 3 and checked.connections > before[1], proc.stderr

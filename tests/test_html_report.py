"""The HTML report opened in a real browser: headless Chromium (Debian's) through selenium
and chromedriver, with the network cut off. The plots must have rendered (Plotly's SVG),
one shaded band per spike, no console error, no request leaving the page; a capture whose
request path is markup shows it as text and runs nothing."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from lab_samples import SAMPLES

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ROOT = Path(__file__).resolve().parents[1]
TAILTAP = [str(Path(os.sys.executable).parent / "tailtap")]

needs_browser = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                   reason="chromium and chromium-driver (Debian) are needed: make test installs them")  # fmt: skip


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
                "--window-size=1280,2000"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_network_conditions(offline=True, latency=0, throughput=0)  # no network at all
    yield driver
    driver.quit()


def _tailtap(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TAILTAP, *args], capture_output=True, text=True, timeout=300, check=True)


def _open(browser, page: Path) -> dict:
    browser.get(page.as_uri())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if browser.execute_script("return document.querySelectorAll('.plot .main-svg').length"):
            break
        time.sleep(0.2)
    time.sleep(0.5)
    return browser.execute_script("""
        return {
          plots: document.querySelectorAll('.plot').length,
          drawn: [...document.querySelectorAll('.plot')].filter(p => p.querySelector('svg.main-svg')).length,
          shaded: document.querySelector('#plot-timeline') ?
                  document.querySelectorAll('#plot-timeline .shapelayer path').length : 0,
          resources: performance.getEntriesByType('resource').map(r => r.name),
          xss: window.__xss || null,
          text: document.body.innerText,
        };""")  # fmt: skip


def _console_errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@needs_browser
@pytest.mark.parametrize("sample", ["loss_burst", "server_stall"])
def test_report_renders_offline_with_its_spikes_shaded(tmp_path, browser, sample):
    store, page = tmp_path / "store", tmp_path / "report.html"
    _tailtap("analyze", str(SAMPLES / sample / "capture.pcap"), "--out", str(store), "--no-report")
    _tailtap("report", "--store", str(store), "--html", str(page))
    spikes = json.loads(_tailtap("report", "--store", str(store), "-f", "json").stdout)["spikes"]
    got = _open(browser, page)
    assert got["plots"] == 4 and got["drawn"] == 4, got["plots"]
    assert got["shaded"] == len(spikes) > 0
    assert got["resources"] == [], got["resources"]  # nothing fetched: scripts and styles are inline
    assert _console_errors(browser) == []
    assert "Where each spike concentrates" in got["text"]


@needs_browser
def test_explain_html_draws_the_waterfall(tmp_path, browser):
    store, page = tmp_path / "store", tmp_path / "explain.html"
    _tailtap("analyze", str(SAMPLES / "loss_burst" / "capture.pcap"), "--out", str(store), "--no-report")
    slowest = json.loads(_tailtap("report", "--store", str(store), "-f", "json").stdout)["slowest_requests"][0]
    _tailtap("explain", "--store", str(store), "--request", f"{slowest['conn_id']}:{slowest['stream_id']}", "--html", str(page))
    got = _open(browser, page)
    assert got["plots"] == 2 and got["drawn"] == 2
    assert got["resources"] == [] and _console_errors(browser) == []


def _serve_once(port: int, ready: threading.Event) -> None:
    with socket.socket() as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", port))
        ls.listen(1)
        ready.set()
        conn, _ = ls.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
            conn.recv(10)


@needs_browser
@pytest.mark.skipif(shutil.which("tcpdump") is None or os.geteuid() != 0, reason="needs tcpdump and root to capture on loopback")
def test_markup_from_the_capture_is_text(tmp_path, browser):
    """A real request whose path is markup (sent by a raw socket, captured by tcpdump)."""
    import test_real_stacks as rs

    port = rs.free_port()
    capture = tmp_path / "xss.pcap"
    cap = rs.Capture(port, capture)
    ready = threading.Event()
    t = threading.Thread(target=_serve_once, args=(port, ready), daemon=True)
    t.start()
    ready.wait(5)
    evil = "/<script>window.__xss=1</script><svg/onload=window.__xss=2>"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET {evil} HTTP/1.1\r\nHost: <b>host</b>\r\n\r\n".encode())
        s.recv(4096)
    t.join(5)
    cap.stop()
    store, page = tmp_path / "store", tmp_path / "report.html"
    _tailtap("analyze", str(capture), "--out", str(store), "--no-report")
    _tailtap("report", "--store", str(store), "--html", str(page))
    got = _open(browser, page)
    assert got["xss"] is None
    assert evil in got["text"]  # shown as the text it is
    assert _console_errors(browser) == []

"""Hostile inputs against the real tools: does the event loop keep running, and how big do we get?

Each case runs in a fresh Python process (so peak memory is that case's own), with a heartbeat
task that asks to wake every 10 ms beside one real tool call. The worst stall is how late the
heartbeat woke at worst; the peak is the process's high-water mark (VmHWM) and, separately, the
largest child it waited for (ripgrep, the HTML converter) from getrusage. Inputs are built by
this (parent) process before the case starts, so building them is not measured.

Cases: ReDoS in grep (a lookahead forces the Python engine: catastrophic backtracking), a glob
bomb in find, a stacked gzip (2 GiB inside a few KB) in web_fetch, a 2 MB HTML page in
web_fetch, an edit of a 60 MB file, a 100-megapixel PNG read by the read tool, and a read of
60 MB of newlines (60 million lines: the window is found by counting, never split whole). `idle` is
the heartbeat alone: the floor of the measurement. `--extras` adds the largest inputs the tools
still accept (an edit just under the edit cap; six parallel reads of an image at the pixel cap).

Run: uv run python -m benchmarks.tool_guard [--extras] [--cases grep_redos find_glob_bomb ...]
     uv run python benchmarks/tool_guard.py
Prints the conditions, a table, and last one JSON line with worst_loop_stall_ms and peak_rss_mb
(the largest of every case's own peak and its children's). Targets: no stall over 100 ms, peak
under 500 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import os
import platform
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HEARTBEAT_S = 0.010
STALL_TARGET_MS = 100.0
PEAK_TARGET_MB = 500.0
CASE_LIMIT_S = 240.0  # a case that blocks its loop cannot time itself out: the parent kills it

REDOS_LINE = "a" * 27 + "!"
REDOS_PATTERN = r"^(?=a)(a+)+$"
GLOB_BOMB = "*a*a*a*a*b"
GLOB_FILES = 40
GZIP_INNER = 2 * 1024**3
HTML_BYTES = 2 * 1024 * 1024
EDIT_BYTES = 60 * 1024 * 1024
IMAGE_SIDE = 10_000
PARALLEL_READS = 6


# -- inputs (built in the parent) ------------------------------------------------------------


def build_grep(work: Path) -> str:
    (work / "ws").mkdir()
    (work / "ws" / "victim.txt").write_text((REDOS_LINE + "\n") * 3)
    return f"/{REDOS_PATTERN}/ on 3 lines of {len(REDOS_LINE)} chars"


def build_find(work: Path) -> str:
    (work / "ws").mkdir()
    for index in range(GLOB_FILES):
        (work / "ws" / ("a" * 120 + f"{index:03}.txt")).touch()
    return f"'{GLOB_BOMB}' over {GLOB_FILES} names of 127 chars"


def stacked_gzip(size: int) -> bytes:
    """gzip(gzip(size zero bytes)), built without holding `size` bytes: deflate output after a
    full flush does not depend on what came before, so one flushed 1 MiB block repeats."""
    block_input = bytes(1024 * 1024)
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = packer.compress(block_input) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(block_input) + packer.flush(zlib.Z_FULL_FLUSH)
    if packer.compress(block_input) + packer.flush(zlib.Z_FULL_FLUSH) != block:
        raise RuntimeError("zlib's flushed blocks differ: cannot build the stacked gzip")
    count = size // len(block_input)
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(block_input, crc)
    inner = b"".join(
        [
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff",
            first,
            block * (count - 1),
            packer.flush(),  # the final (empty) block
            struct.pack("<II", crc, size & 0xFFFFFFFF),
        ]
    )
    return gzip.compress(inner, compresslevel=9)


def build_gzip(work: Path) -> str:
    body = stacked_gzip(GZIP_INNER)
    (work / "body.bin").write_bytes(body)
    return f"'Content-Encoding: gzip, gzip', {len(body) / 1024:.1f} KB → 2 GiB"


def build_html(work: Path) -> str:
    row = "<tr><td>cell <b>bold</b></td><td><a href='/x'>link</a></td></tr>\n"
    page = "<html><body><table>" + row * (HTML_BYTES // len(row)) + "</table></body></html>"
    (work / "body.bin").write_bytes(page.encode())
    return f"{len(page) / 1024**2:.1f} MB table page"


def _write_lines(path: Path, size: int) -> int:
    line = "a fairly ordinary line of text in a big file, number {:09}\n"
    count = size // len(line.format(0))
    with path.open("w") as out:
        for start in range(0, count, 100_000):
            out.write("".join(line.format(i) for i in range(start, min(count, start + 100_000))))
    return path.stat().st_size


def build_edit(work: Path, size: int = EDIT_BYTES) -> str:
    (work / "ws").mkdir()
    written = _write_lines(work / "ws" / "big.txt", size)
    return f"one unique line replaced in a {written / 1024**2:.1f} MB file"


def build_edit_at_cap(work: Path) -> str:
    from tools import files

    cap = getattr(files, "MAX_EDIT_FILE_BYTES", EDIT_BYTES)
    return build_edit(work, cap - 64 * 1024) + " (just under the edit cap)"


def _png(path: Path, side: int, channels: int) -> int:
    """A side × side PNG of zeros (grayscale or RGB), written row by row (never held whole)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    packer = zlib.compressobj(9)
    row = bytes(side * channels + 1)  # filter byte + pixels
    idat = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
    color_type = 0 if channels == 1 else 2
    header = struct.pack(">IIBBBBB", side, side, 8, color_type, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat)
    path.write_bytes(png + chunk(b"IEND", b""))
    return path.stat().st_size


NEWLINES_BYTES = 60 * 1024 * 1024


def build_newlines(work: Path) -> str:
    (work / "ws").mkdir()
    (work / "ws" / "blank.txt").write_bytes(b"\n" * NEWLINES_BYTES)
    return f"{NEWLINES_BYTES // 2**20} MB of newlines ({NEWLINES_BYTES:,} lines), read whole"


def build_image(work: Path) -> str:
    (work / "ws").mkdir()
    size = _png(work / "ws" / "bomb.png", IMAGE_SIDE, 1)
    return f"{IMAGE_SIDE}×{IMAGE_SIDE} PNG, {size / 1024:.0f} KB"


def build_images_at_cap(work: Path) -> str:
    from tools import files

    side = math.isqrt(getattr(files, "MAX_IMAGE_PIXELS", IMAGE_SIDE**2))
    (work / "ws").mkdir()
    size = _png(work / "ws" / "bomb.png", side, 3)
    kb = size / 1024
    return f"{side}×{side} RGB PNG of {kb:.0f} KB (the pixel cap), {PARALLEL_READS} reads at once"


# -- cases (run in the child) ----------------------------------------------------------------


def _ctx(work: Path) -> Any:
    from core.tools import ToolContext

    return ToolContext(call_id="bench", workspace=work / "ws")


async def _call(tool: Any, params: Any, ctx: Any) -> str:
    """Run a tool as the agent loop does (its own timeout) and say briefly how it ended."""
    from core.tools import ToolError

    try:
        async with asyncio.timeout(tool.timeout_s):
            result = await tool.execute("bench", params, ctx)
    except TimeoutError:
        return f"timed out after {tool.timeout_s:g} s"
    except ToolError as exc:
        return "refused: " + exc.message.splitlines()[0][:90]
    text = "".join(getattr(part, "text", "") for part in result.content)
    kinds = {type(part).__name__ for part in result.content}
    return f"ok ({', '.join(sorted(kinds))}, {len(text)} chars)"


async def run_idle(work: Path) -> str:
    await asyncio.sleep(1.0)
    return "heartbeat only"


async def run_grep(work: Path) -> str:
    from tools.grep import GrepParams, GrepTool

    return await _call(GrepTool(), GrepParams(pattern=REDOS_PATTERN), _ctx(work))


async def run_find(work: Path) -> str:
    from tools.files import FindParams, FindTool

    return await _call(FindTool(), FindParams(pattern=GLOB_BOMB), _ctx(work))


async def _serve(work: Path, headers: dict[str, str]) -> tuple[Any, str]:
    from aiohttp import web

    body = (work / "body.bin").read_bytes()

    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"127.0.0.1:{port}"


async def _fetch(work: Path, headers: dict[str, str]) -> str:
    from tools.web_fetch import WebFetchParams, WebFetchTool

    runner, host = await _serve(work, headers)
    try:
        tool = WebFetchTool(allow_hosts=[host])
        return await _call(tool, WebFetchParams(url=f"http://{host}/"), _ctx(work))
    finally:
        await runner.cleanup()


async def run_gzip(work: Path) -> str:
    return await _fetch(work, {"Content-Type": "text/plain", "Content-Encoding": "gzip, gzip"})


async def run_html(work: Path) -> str:
    return await _fetch(work, {"Content-Type": "text/html; charset=utf-8"})


async def run_edit(work: Path) -> str:
    from tools.files import EditParams, EditTool

    params = EditParams(
        path="big.txt",
        old_text="number 000100000\n",
        new_text="number 000100000 (edited)\n",
    )
    return await _call(EditTool(), params, _ctx(work))


async def run_newlines(work: Path) -> str:
    from tools.files import ReadParams, ReadTool

    return await _call(ReadTool(), ReadParams(path="blank.txt"), _ctx(work))


async def run_image(work: Path) -> str:
    from tools.files import ReadParams, ReadTool

    return await _call(ReadTool(), ReadParams(path="bomb.png"), _ctx(work))


async def run_images_at_once(work: Path) -> str:
    from tools.files import ReadParams, ReadTool

    calls = [
        _call(ReadTool(), ReadParams(path="bomb.png"), _ctx(work)) for _ in range(PARALLEL_READS)
    ]
    outcomes = await asyncio.gather(*calls)
    return " / ".join(sorted(set(outcomes)))


Case = tuple[Callable[[Path], str], Callable[[Path], Awaitable[str]]]
CASES: dict[str, Case] = {
    "idle": (lambda work: "nothing", run_idle),
    "grep_redos": (build_grep, run_grep),
    "find_glob_bomb": (build_find, run_find),
    "web_fetch_gzip_stack": (build_gzip, run_gzip),
    "web_fetch_html_2mb": (build_html, run_html),
    "edit_60mb": (build_edit, run_edit),
    "read_image_bomb": (build_image, run_image),
    "read_60mb_newlines": (build_newlines, run_newlines),
}
# Not hostile, but the worst that is still accepted: run with --extras.
EXTRAS: dict[str, Case] = {
    "edit_at_cap": (build_edit_at_cap, run_edit),
    "read_images_at_cap_x6": (build_images_at_cap, run_images_at_once),
}
ALL_CASES = {**CASES, **EXTRAS}


def _vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(name: str, work: Path) -> dict[str, Any]:
    """The child: one case beside the heartbeat."""
    # Imports happen before the heartbeat, as in a running bot (and the test server's too).
    import aiohttp.web  # noqa: F401

    import core.tools  # noqa: F401
    import tools.files
    import tools.grep
    import tools.web_fetch  # noqa: F401

    worst = 0.0
    beats = 0
    stop = asyncio.Event()

    async def heartbeat() -> None:
        nonlocal worst, beats
        expected = time.perf_counter() + HEARTBEAT_S
        while not stop.is_set():
            await asyncio.sleep(HEARTBEAT_S)
            now = time.perf_counter()
            worst = max(worst, now - expected)
            beats += 1
            expected = now + HEARTBEAT_S

    baseline = _vm_hwm_mb()
    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.1)
    worst = 0.0  # start-up wobble is not the case's
    started = time.perf_counter()
    outcome = await ALL_CASES[name][1](work)
    wall = time.perf_counter() - started
    stop.set()
    await beat
    return {
        "outcome": outcome,
        "worst_stall_ms": round(worst * 1000, 1),
        "beats": beats,
        "wall_s": round(wall, 2),
        "baseline_rss_mb": round(baseline, 1),
        "peak_rss_mb": round(_vm_hwm_mb(), 1),
        "child_peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        ),
    }


def run_case(name: str) -> dict[str, Any]:
    """The parent: build the input, run the case in a fresh process, read its JSON line."""
    with tempfile.TemporaryDirectory(prefix="tool-guard-") as tmp:
        work = Path(tmp)
        described = ALL_CASES[name][0](work)
        command = [sys.executable, str(Path(__file__).resolve()), "--child", name, str(work)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=CASE_LIMIT_S, check=False
            )
        except subprocess.TimeoutExpired:
            return {
                "input": described,
                "outcome": f"killed: the case ran over {CASE_LIMIT_S:g} s",
                "worst_stall_ms": CASE_LIMIT_S * 1000,
                "peak_rss_mb": None,
                "child_peak_rss_mb": None,
                "wall_s": CASE_LIMIT_S,
            }
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {
            "input": described,
            "outcome": f"crashed (exit {done.returncode}): {tail[:80]}",
            "worst_stall_ms": None,
            "peak_rss_mb": None,
            "child_peak_rss_mb": None,
            "wall_s": None,
        }
    return {"input": described, **json.loads(lines[-1])}


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", nargs="+", choices=list(ALL_CASES), default=list(CASES))
    parser.add_argument(
        "--extras", action="store_true", help="also run the largest accepted inputs"
    )
    parser.add_argument("--child", nargs=2, metavar=("CASE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, work = args.child
        print(json.dumps(asyncio.run(measure(name, Path(work)))))
        return

    rg = shutil.which("rg")
    rg_version = (
        subprocess.run([rg, "--version"], capture_output=True, text=True).stdout if rg else ""
    )
    print(
        f"conditions: python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} cores, uid {os.getuid()}, "
        f"ripgrep {rg_version.split()[1] if rg_version else 'absent'}; one fresh process per "
        f"case; heartbeat every {HEARTBEAT_S * 1000:g} ms beside one real tool call (the tool's "
        f"own timeout applies); peak = VmHWM of the case process, children separately; "
        f"targets: stall <= {STALL_TARGET_MS:g} ms, peak < {PEAK_TARGET_MB:g} MB"
    )
    names = list(args.cases) + [name for name in EXTRAS if args.extras and name not in args.cases]
    results = {name: run_case(name) for name in names}
    header = (
        f"{'case':<22} {'stall ms':>9} {'peak MB':>8} {'child MB':>9} {'wall s':>7}  "
        f"{'meets':<5}  input → outcome"
    )
    print(header)
    print("-" * len(header))
    for name, row in results.items():
        peaks = [p for p in (row.get("peak_rss_mb"), row.get("child_peak_rss_mb")) if p is not None]
        row["meets_targets"] = (
            row.get("worst_stall_ms") is not None
            and row["worst_stall_ms"] <= STALL_TARGET_MS
            and bool(peaks)
            and max(peaks) < PEAK_TARGET_MB
        )
        print(
            f"{name:<22} {_fmt(row.get('worst_stall_ms'), '9.1f')} "
            f"{_fmt(row.get('peak_rss_mb'), '8.1f')} {_fmt(row.get('child_peak_rss_mb'), '9.1f')} "
            f"{_fmt(row.get('wall_s'), '7.2f')}  {'yes' if row['meets_targets'] else 'NO':<5}  "
            f"{row['input']} → {row['outcome']}"
        )
    stalls = [r["worst_stall_ms"] for r in results.values() if r.get("worst_stall_ms") is not None]
    peaks = [
        p
        for r in results.values()
        for p in (r.get("peak_rss_mb"), r.get("child_peak_rss_mb"))
        if p is not None
    ]
    missed = [name for name, row in results.items() if not row["meets_targets"]]
    print(f"cases missing a target: {', '.join(missed) if missed else 'none'}")
    print(
        json.dumps(
            {
                "worst_loop_stall_ms": max(stalls) if stalls else None,
                "peak_rss_mb": max(peaks) if peaks else None,
                "cases_missing_targets": missed,
                "cases": {
                    name: {k: v for k, v in row.items() if k != "input"}
                    for name, row in results.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()

"""Whatever a subscriber raises stays on the delivery thread: the interpreter never aborts, polling
goes on, reports are bounded, and the process exits cleanly. Each case runs in an interpreter of
its own that exits normally (no ``os._exit``), so a crash in the interpreter's shutdown shows as
its exit status and stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

PRELUDE = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import relay_metrics.plugin as plugin
    from relay_metrics import subscribers

    CONFIG = plugin.PluginConfig(components=[plugin.ComponentSpec(
        kind="resource_metrics",
        config={"polling": {"enabled": True, "interval_millis": 20},
                "extensions": {"kernel_events": False}})])
    ticks = []
    subscribers.register("counting", lambda event: ticks.append(time.monotonic()))
    """
)


def run(body: str) -> tuple[dict[str, object], str]:
    """Runs PRELUDE + body; the JSON it printed last and its stderr. Asserts a clean exit."""
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Fatal Python error" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, f"exit {result.returncode}\nstderr: {result.stderr[-3000:]}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, f"printed nothing; stderr: {result.stderr[-3000:]}"
    return json.loads(lines[-1]), result.stderr


@pytest.mark.parametrize("raised", ["SystemExit(3)", "SystemExit('bye')", "GeneratorExit()", "Custom()"])
def test_a_subscriber_raising_a_base_exception_is_contained_and_reported_once(raised: str) -> None:
    out, stderr = run(
        f"""
        class Custom(BaseException):
            pass

        calls = [0]
        def raising(event):
            calls[0] += 1
            raise {raised}
        subscribers.register("raising", raising)

        async def main():
            async with plugin.activate(CONFIG):
                await asyncio.sleep(1.0)
            await asyncio.sleep(0.1)
        asyncio.run(main())
        print(json.dumps({{"calls": calls[0], "ticks": len(ticks)}}))
        """
    )
    # Polling went on at 20 ms for the second (not stopped after one tick).
    assert out["calls"] >= 10 and out["ticks"] >= 10, out
    # One report with its traceback: later failures are within the minute's silence.
    assert stderr.count("'raising' failed") == 1, stderr[-3000:]
    assert stderr.count("Traceback") == 1, stderr[-3000:]


def test_a_subscriber_raising_keyboard_interrupt_interrupts_the_main_thread_once_reported() -> None:
    out, stderr = run(
        """
        import signal
        # Python's Ctrl-C handler, as under a terminal: started by a parent that ignores SIGINT
        # (a background job of a shell without job control), Python installs none, and
        # interrupt_main() then does nothing.
        signal.signal(signal.SIGINT, signal.default_int_handler)

        calls = [0]
        def interrupting(event):
            calls[0] += 1
            raise KeyboardInterrupt

        interrupted = 0
        def sleep(seconds):
            global interrupted
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                try:
                    time.sleep(0.01)  # the main thread, where Ctrl-C lands
                except KeyboardInterrupt:
                    interrupted += 1

        activation = asyncio.run(plugin.initialize(CONFIG))
        subscribers.register("interrupting", interrupting)
        sleep(1.0)
        subscribers.deregister("interrupting")
        subscribers.flush()
        sleep(0.2)  # an interrupt handed over by the last delivery
        asyncio.run(activation.close())
        print(json.dumps({"calls": calls[0], "interrupted": interrupted, "ticks": len(ticks)}))
        """
    )
    assert out["calls"] >= 10 and out["ticks"] >= 10, out
    assert out["interrupted"] >= 5, out
    assert stderr.count("Traceback") == 1, stderr[-3000:]
    assert stderr.count("'interrupting' failed") == 1, stderr[-3000:]


def test_the_interpreter_exits_cleanly_with_polling_left_on_and_a_subscriber_raising_system_exit() -> None:
    out, _ = run(
        """
        def exiting(event):
            raise SystemExit(5)
        subscribers.register("exiting", exiting)

        async def main():
            activation = await plugin.initialize(CONFIG)
            await asyncio.sleep(0.5)
            return activation  # never closed: the process exits with polling on
        activation = asyncio.run(main())
        print(json.dumps({"ticks": len(ticks), "active": activation.is_active}))
        """
    )
    assert out["ticks"] >= 5 and out["active"] is True, out


def test_a_failure_outside_the_subscribers_is_written_as_unraisable_at_a_bounded_rate() -> None:
    # What escapes the subscribers' containment reaches the delivery thread's loop: it must
    # report it without exiting, not on every tick, and go on delivering.
    out, stderr = run(
        """
        def broken(name, error):
            raise SystemExit(7)
        subscribers._contain = broken
        subscribers.register("raising", lambda event: 1 / 0)

        async def main():
            async with plugin.activate(CONFIG):
                await asyncio.sleep(1.0)
        asyncio.run(main())
        print(json.dumps({"ticks": len(ticks)}))
        """
    )
    assert out["ticks"] >= 10, out
    assert stderr.count("relay_metrics' subscriber delivery thread") == 1, stderr[-3000:]
    assert "SystemExit: 7" in stderr, stderr[-3000:]


def test_a_subscriber_that_never_returns_holds_the_exit_for_at_most_a_few_seconds() -> None:
    started = time.monotonic()
    out, _ = run(
        """
        import threading
        entered = threading.Event()
        def blocking(event):
            entered.set()
            time.sleep(3600)
        subscribers.register("blocking", blocking)

        async def main():
            activation = await plugin.initialize(CONFIG)
            while not entered.is_set():
                await asyncio.sleep(0.01)
            return activation  # never closed: the exit stops polling
        asyncio.run(main())
        print(json.dumps({"entered": entered.is_set()}))
        """
    )
    assert out["entered"] is True
    # The exit waits 2 s for the subscriber, then leaves it as a daemon thread.
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("seconds", [0.6, 2.52, 3.0])
def test_the_interpreter_exits_cleanly_with_a_subscriber_still_running(seconds: float) -> None:
    # A callback still running when the main thread ends (here one returning around the end of
    # the exit's wait for the polling thread, where a native thread asking for the GIL of a
    # finalizing interpreter crashed it) runs on a daemon thread and is left to the exit.
    out, _ = run(
        f"""
        def sleeping(event):
            time.sleep({seconds})
        subscribers.register("sleeping", sleeping)

        async def main():
            activation = await plugin.initialize(CONFIG)
            await asyncio.sleep(0.5)
            return activation  # never closed
        asyncio.run(main())
        print(json.dumps({{"ticks": len(ticks)}}))
        """
    )
    assert out["ticks"] >= 1, out

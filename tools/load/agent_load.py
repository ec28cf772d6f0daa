#!/usr/bin/env python3
"""Loopback load on the agent's HTTP endpoint, bounded in count and time.

Starts `relay-metrics serve` on 127.0.0.1 (a free port), holds IDLE connections that send
nothing and SLOWLORIS connections that send a request head one byte a second (each re-opened
when the server closes it: the attack is held, not given up), and meanwhile measures a
well-behaved client's `GET /metrics` latency (connect to last body byte), both on a fresh
connection per request and on one kept-alive connection. Prints one JSON object.

    tools/load/agent_load.py --binary target/release/relay-metrics \
        --idle 1000 --slowloris 200 --duration 30

Only 127.0.0.1 is ever contacted; everything stops after --duration seconds.
"""

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import threading
import time

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: load\r\n\r\n"


def quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def read_response(reader):
    """Reads one response with a Content-Length body; returns (status, body length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    await reader.readexactly(length)
    return status, length


class Held:
    """Counts of the attack connections."""

    def __init__(self):
        self.open = 0
        self.reopened = 0
        self.failed = 0


async def hold(host, port, kind, stop, held):
    """One attack connection, re-opened whenever the server closes it, until `stop`."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        except (OSError, asyncio.TimeoutError):
            held.failed += 1
            await asyncio.sleep(0.5)
            continue
        held.open += 1
        try:
            if kind == "slowloris":
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: load\r\nX-Slow: ")
                while not stop.is_set():
                    writer.write(b"a")
                    await writer.drain()
                    try:
                        # Also notices the server closing the connection.
                        if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                            break
                    except asyncio.TimeoutError:
                        pass
            else:
                while not stop.is_set():
                    try:
                        if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                            break
                    except asyncio.TimeoutError:
                        pass
        except OSError:
            pass
        finally:
            held.open -= 1
            writer.close()
        if not stop.is_set():
            held.reopened += 1


async def good_client(host, port, rate, duration, keep_alive):
    """`GET /metrics` at `rate` per second for `duration` s; returns latencies (s) and errors."""
    latencies, errors = [], 0
    reader = writer = None
    end = time.monotonic() + duration
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), 10
                )
            writer.write(REQUEST)
            status, _ = await asyncio.wait_for(read_response(reader), 10)
            if status != 200:
                errors += 1
            else:
                latencies.append(time.monotonic() - started)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            errors += 1
            writer = None
        if not keep_alive and writer is not None:
            writer.close()
            writer = None
        await asyncio.sleep(max(0.0, 1.0 / rate - (time.monotonic() - started)))
    if writer is not None:
        writer.close()
    return latencies, errors


def summary(latencies, errors):
    if not latencies:
        return {"requests": 0, "errors": errors}
    ms = [x * 1000 for x in latencies]
    return {
        "requests": len(ms),
        "errors": errors,
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(quantile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
    }


async def run(args, host, port):
    stop = asyncio.Event()
    idle, slow = Held(), Held()
    tasks = [asyncio.create_task(hold(host, port, "idle", stop, idle)) for _ in range(args.idle)]
    tasks += [
        asyncio.create_task(hold(host, port, "slowloris", stop, slow))
        for _ in range(args.slowloris)
    ]
    # Let the attack settle before measuring.
    await asyncio.sleep(args.settle)
    held_at_start = {"idle": idle.open, "slowloris": slow.open}
    fresh, keep = await asyncio.gather(
        good_client(host, port, args.rate, args.duration, keep_alive=False),
        good_client(host, port, args.rate, args.duration, keep_alive=True),
    )
    held_at_end = {"idle": idle.open, "slowloris": slow.open}
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "idle": args.idle,
        "slowloris": args.slowloris,
        "held_when_measuring": held_at_start,
        "held_at_end": held_at_end,
        "reopened": {"idle": idle.reopened, "slowloris": slow.reopened},
        "connect_failures": {"idle": idle.failed, "slowloris": slow.failed},
        "duration_s": args.duration,
        "fresh_connection": summary(*fresh),
        "keep_alive": summary(*keep),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/relay-metrics")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slowloris", type=int, default=200)
    parser.add_argument("--duration", type=float, default=30.0, help="measuring time, s")
    parser.add_argument("--settle", type=float, default=3.0, help="attack set-up time, s")
    parser.add_argument("--rate", type=float, default=10.0, help="good requests/s per client")
    parser.add_argument("--interval-ms", default="1000")
    args = parser.parse_args()
    if args.idle + args.slowloris > 20000 or args.duration > 600:
        sys.exit("bounded: at most 20,000 connections and 600 s")

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = args.idle + args.slowloris + 256
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))

    agent = subprocess.Popen(
        [args.binary, "serve", "--listen", "127.0.0.1:0", "--scope", "global",
         "--interval-ms", args.interval_ms],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        for line in agent.stderr:
            if "serving http://" in line:
                address = line.split("serving http://", 1)[1].split("/", 1)[0]
                host, port = address.rsplit(":", 1)
                break
        if port is None:
            sys.exit("the agent did not start")
        # Keep draining the agent's log: a full pipe would block its writes.
        log = []
        threading.Thread(target=lambda: log.extend(agent.stderr), daemon=True).start()
        time.sleep(1.5)  # the first snapshot
        result = asyncio.run(run(args, "127.0.0.1", int(port)))
        result["agent_alive"] = agent.poll() is None
        result["agent_log_lines"] = [line.rstrip() for line in log[-5:]]
        print(json.dumps(result, indent=2))
    finally:
        agent.terminate()
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Holds N idle line-protocol connections (bgbench-uplink-floor's `line` or `tcp` mode) open
until stdin closes: each sends a credential line, waits for "ready", and stays. Prints "ready N"
once all are up. The relay's own devices are simulated by `bgbench-relay idle`, which speaks
the HTTP/2 uplink; this is for the transports below it.

    uplink_idle.py PORT [CA-FILE] N   (with CA-FILE: TLS, else plain TCP)
"""
import asyncio
import ssl
import sys


async def main():
    port, count = int(sys.argv[1]), int(sys.argv[-1])
    context = None
    if len(sys.argv) > 3:
        context = ssl.create_default_context(cafile=sys.argv[2])
    held = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(
            "localhost", port, ssl=context, server_hostname="localhost" if context else None)
        writer.write(b"Bearer 0123456789abcdef0123456789abcdef.secret\n")
        await writer.drain()
        line = await reader.readline()
        if b"ready" not in line:
            sys.exit(f"error: no ready line: {line!r}")
        held.append((reader, writer))
    print(f"ready {len(held)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


asyncio.run(main())

"""Closed-loop HTTP/1.1 load over a Unix socket: C connections, each sending GET PATH back to
back (keep-alive) until N requests in all are answered; prints p50/p90/p99/max latency and the
rate as one JSON line. Standard library only.

Usage: uds_load.py SOCKET PATH CONNECTIONS REQUESTS [TOKEN]
"""
import asyncio
import json
import sys
import time


async def client(socket_path, request, todo, latencies, errors):
    reader, writer = await asyncio.open_unix_connection(socket_path, limit=1 << 24)
    try:
        while todo[0] > 0:
            todo[0] -= 1
            started = time.perf_counter()
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if status != 200:
                errors.append(status)
    finally:
        writer.close()


async def main():
    socket_path, path, connections, requests = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    token = sys.argv[5] if len(sys.argv) > 5 else None
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    request = f"GET {path} HTTP/1.1\r\nHost: bench\r\n{auth}\r\n".encode()
    todo, latencies, errors = [requests], [], []
    started = time.perf_counter()
    await asyncio.gather(*(client(socket_path, request, todo, latencies, errors) for _ in range(connections)))
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p):
        return round(latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000, 2)

    print(json.dumps({"requests": len(latencies), "errors": len(errors), "rate": round(len(latencies) / elapsed, 1),
                      "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99), "max_ms": round(latencies[-1] * 1000, 2)}))


asyncio.run(main())

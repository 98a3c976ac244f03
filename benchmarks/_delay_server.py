"""A loopback OpenAI-compatible server that answers every request after a fixed delay (benchmarks only).

    python benchmarks/_delay_server.py PORT_FILE DELAY_S

asyncio, HTTP/1.1 keep-alive, listen backlog 4096: it serves thousands of requests per second on one
core, so the client under test is what a benchmark measures. ``POST .../completions`` answers one
choice after ``DELAY_S``; ``GET /stats`` returns ``{"served", "most_in_flight"}`` and ``POST /reset``
zeroes them. The port it bound is written to PORT_FILE.
"""

import asyncio
import json
import sys

REPLY = json.dumps({"id": "x", "object": "text_completion", "model": "delay",
                    "choices": [{"index": 0, "text": " 24", "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 1}}).encode()
STATE = {"served": 0, "in_flight": 0, "most_in_flight": 0}


def _reply(writer, body: bytes, status: str = "200 OK") -> None:
    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                 "Connection: keep-alive\r\n\r\n".encode() + body)


async def handle(reader, writer, delay: float):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            if length:
                await reader.readexactly(length)
            if method == "GET" and path.endswith("/stats"):
                _reply(writer, json.dumps({k: STATE[k] for k in ("served", "most_in_flight")}).encode())
            elif path.endswith("/reset"):
                STATE.update(served=0, most_in_flight=0)
                _reply(writer, b"{}")
            else:
                STATE["in_flight"] += 1
                STATE["most_in_flight"] = max(STATE["most_in_flight"], STATE["in_flight"])
                await asyncio.sleep(delay)
                STATE["in_flight"] -= 1
                STATE["served"] += 1
                _reply(writer, REPLY)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port_file: str, delay: float):
    server = await asyncio.start_server(lambda r, w: handle(r, w, delay), "127.0.0.1", 0, backlog=4096)
    with open(port_file, "w") as fh:
        fh.write(str(server.sockets[0].getsockname()[1]))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))

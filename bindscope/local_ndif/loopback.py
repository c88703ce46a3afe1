"""The local server's network-namespace helpers, run as a script (standard library only).

``up``: bring ``lo`` up; ``hold``: keep the namespace; ``inside DIR PORT...``: serve
``DIR/PORT.sock`` from 127.0.0.1:PORT; ``outside DIR PORT...``: serve 127.0.0.1:PORT from it.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import signal
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def loopback_up() -> None:
    """Set the ``lo`` device's UP flag (as ``ip link set lo up`` does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(probe, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()


def _bridge(connect: Callable[[], Awaitable[Streams]]) -> Callable:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            far_reader, far_writer = await connect()
        except OSError:  # nothing listens there (yet): the client sees a closed connection
            writer.close()
            return
        await asyncio.gather(_copy(reader, far_writer), _copy(far_reader, writer))
        far_writer.close()
        writer.close()

    return handle


async def _forward(side: str, folder: Path, ports: list[int]) -> None:
    servers = []
    for port in ports:
        path = folder / f"{port}.sock"
        if side == "inside":
            path.unlink(missing_ok=True)
            handle = _bridge(functools.partial(asyncio.open_connection, "127.0.0.1", port))
            servers.append(await asyncio.start_unix_server(handle, str(path)))
        else:
            handle = _bridge(functools.partial(asyncio.open_unix_connection, str(path)))
            servers.append(await asyncio.start_server(handle, "127.0.0.1", port))
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> None:
    """``up``, ``hold``, or ``inside|outside DIR PORT...`` (see the module docstring)."""
    if argv[0] == "up":
        loopback_up()
    elif argv[0] == "hold":
        while True:
            signal.pause()
    else:
        asyncio.run(_forward(argv[0], Path(argv[1]), [int(p) for p in argv[2:]]))


if __name__ == "__main__":
    main(sys.argv[1:])

"""A small SMTP server on 127.0.0.1 for tests: it speaks enough of RFC 5321 for smtplib (EHLO,
MAIL, RCPT, DATA, RSET, NOOP, QUIT) and keeps each message it accepted, parsed. Real sockets,
so Django's SMTP backend delivers through it as it would to a mail relay."""

from __future__ import annotations

import email
import socketserver
import threading
import time
from dataclasses import dataclass, field
from email.message import Message


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: Message = field(repr=False)

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    @property
    def body(self) -> str:
        return self.message.get_payload(decode=True).decode()


class _Session(socketserver.StreamRequestHandler):
    timeout = 10

    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self) -> None:
        server: SMTPServer = self.server.owner
        with server.lock:
            refuse, server.refuse = server.refuse > 0, max(0, server.refuse - 1)
        if refuse:  # a relay that is busy or down for maintenance answers so, and hangs up
            self.reply("421 127.0.0.1 service not available, try again later")
            return
        self.reply("220 127.0.0.1 test SMTP ready")
        sender, recipients = "", []
        while line := self.rfile.readline(4096):
            command = line.decode(errors="replace").strip()
            verb = command[:4].upper()
            if verb in ("EHLO", "HELO"):
                self.reply("250 127.0.0.1")
            elif verb == "MAIL":
                sender, recipients = command.partition(":")[2].strip(" <>"), []
                self.reply("250 OK")
            elif verb == "RCPT":
                recipients.append(command.partition(":")[2].strip(" <>"))
                self.reply("250 OK")
            elif verb == "DATA":
                self.reply("354 End data with <CR><LF>.<CR><LF>")
                data = []
                while (part := self.rfile.readline(1 << 20)) not in (b".\r\n", b".\n", b""):
                    data.append(part[1:] if part.startswith(b"..") else part)
                message = email.message_from_bytes(b"".join(data))
                with server.lock:
                    server.received.append(Received(sender, recipients, message))
                self.reply("250 OK: queued")
            elif verb in ("RSET", "NOOP"):
                self.reply("250 OK")
            elif verb == "QUIT":
                self.reply("221 Bye")
                return
            else:
                self.reply("502 Command not implemented")


class _Threaded(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class SMTPServer:
    """Start with `with SMTPServer() as smtp:`; smtp.port, smtp.received, smtp.wait_for(n).
    `refuse`: how many sessions it refuses first (421 at the greeting)."""

    def __init__(self, *, refuse: int = 0) -> None:
        self.refuse = refuse
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self._server = _Threaded(("127.0.0.1", 0), _Session)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SMTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def wait_for(self, count: int, timeout: float = 10) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.received)} messages received, {count} expected")

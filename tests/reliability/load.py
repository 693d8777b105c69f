"""Paced call load from threads: a target rate of calls per second, every answer kept."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from daemon._generated.tooljail.v1 import executor_pb2 as pb


@dataclass(frozen=True)
class Answer:
    """What one call got back: a response, or the status of a failed RPC."""

    tool_use_id: str
    sent_at: float
    """Monotonic time the call was sent."""
    answered_at: float
    response: pb.ExecuteResponse | None = None
    status: grpc.StatusCode | None = None
    details: str = ""


@dataclass
class PacedLoad:
    """Calls `call(i)` from `threads` threads at about `rate` calls per second until stopped.

    `call` sends call number i and returns its tool_use id and the response; an RpcError is kept
    as the answer's status.
    """

    call: Callable[[int], tuple[str, pb.ExecuteResponse]]
    rate: float
    threads: int = 16
    answers: list[Answer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _counter: int = 0
    started_at: float = 0.0
    stopped_at: float = 0.0

    def _next_index(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _work(self, offset: float) -> None:
        interval = self.threads / self.rate
        next_at = self.started_at + offset
        while not self._stop.is_set():
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at += interval
            index = self._next_index()
            sent = time.monotonic()
            try:
                tool_use_id, response = self.call(index)
                answer = Answer(tool_use_id, sent, time.monotonic(), response=response)
            except grpc.RpcError as exc:
                answer = Answer(
                    f"#{index}",
                    sent,
                    time.monotonic(),
                    status=exc.code(),
                    details=exc.details() or "",
                )
            with self._lock:
                self.answers.append(answer)

    def start(self) -> None:
        """Start the threads (staggered so the calls spread over each interval)."""
        self.started_at = time.monotonic()
        step = 1.0 / self.rate
        for n in range(self.threads):
            worker = threading.Thread(target=self._work, args=(n * step,), daemon=True)
            worker.start()
            self._workers.append(worker)

    def stop(self, timeout_s: float = 120.0) -> list[Answer]:
        """Stop sending, wait for the calls in flight, return every answer by send time."""
        self._stop.set()
        self.stopped_at = time.monotonic()
        for worker in self._workers:
            worker.join(timeout_s)
        assert not any(w.is_alive() for w in self._workers), "calls still hang after the load"
        return sorted(self.answers, key=lambda a: a.sent_at)

    @property
    def sent(self) -> int:
        """Calls started so far."""
        return self._counter

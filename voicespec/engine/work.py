"""Batched work as yields: a session's code says *what* it needs computed, a scheduler says *with whom*.

A decoding coroutine (``Generation.advance``, ``SynthesisStream.run``) yields a :class:`Work` where
it needs a model call (a target pass, say) and is resumed with the result. Run on its own
(:func:`drive`, :func:`outputs`) each work is executed alone; a batching scheduler instead collects
the works many sessions yield, executes each kind in one call (:func:`run_works`) and resumes every
session with its share. The session's code is the same either way, so batched and unbatched
decoding cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

R = TypeVar("R")
T = TypeVar("T")
DEFERRED = object()  # what a deferred work's session is resumed with (see Work.deferrable)


class Work:
    """One session's share of a batched call. Subclasses implement :meth:`run`, which executes a
    list of works of that class together and returns one result per work, in order.

    ``deferrable``: the session only passes the result on (it is output, e.g. audio), so a
    scheduler may run the work elsewhere, later, resume the session with :data:`DEFERRED` at once,
    and deliver the result itself, in order with the session's other output."""

    deferrable: ClassVar[bool] = False

    @classmethod
    def run(cls, works: list[Any]) -> list[Any]:
        raise NotImplementedError


def run_grouped(items: Sequence[T], key: Callable[[T], Hashable],
                run: Callable[[list[T]], Iterable[R]]) -> list[R]:
    """Group by key, run, scatter back: ``run`` is called once per distinct ``key(item)`` with the
    items that share it (in input order) and yields one result per item; the results come back in
    the input order. Every batched call (works by kind, passes by stack, warps by sampling config,
    fine stages by model, codec pushes by stream kind) is shaped like this, so it is written once."""
    out: list[Any] = [None] * len(items)
    groups: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(key(item), []).append(i)
    for idx in groups.values():
        results = list(run([items[i] for i in idx]))
        if len(results) != len(idx):
            raise RuntimeError(f"a batched call gave {len(results)} results for {len(idx)} items")
        for i, r in zip(idx, results):
            out[i] = r
    return out


def run_works(works: list[Work]) -> list[Any]:
    """Execute ``works`` grouped by kind (one :meth:`Work.run` per class); results in input order."""
    return run_grouped(works, type, lambda group: type(group[0]).run(group))


def drive(co: Generator[Work, Any, R]) -> R:
    """Run a coroutine that yields only works, each executed alone; return its value."""
    result = None
    while True:
        try:
            work = co.send(result)
        except StopIteration as stop:
            return stop.value
        if not isinstance(work, Work):
            raise TypeError(f"expected a Work, got {type(work).__name__}")
        result = type(work).run([work])[0]


def drive_batch(coroutines: list[Generator[Work, Any, Any]]) -> list[Any]:
    """Run coroutines that yield only works in lockstep: each round, the works of every one still
    running execute together (:func:`run_works`). Their values, in order: what :func:`drive`
    would give each one alone."""
    results: list[Any] = [None] * len(coroutines)
    live = {i: None for i in range(len(coroutines))}  # index -> the value to send next
    while live:
        works: dict[int, Work] = {}
        for i, value in list(live.items()):
            try:
                works[i] = coroutines[i].send(value)
            except StopIteration as stop:
                results[i] = stop.value
                del live[i]
        for i, r in zip(works, run_works(list(works.values()))):
            live[i] = r
    return results


def outputs(co: Generator[Any, Any, Any]) -> Iterator[Any]:
    """The items a coroutine yields that are not works; each work is executed alone in between."""
    result = None
    try:
        while True:
            try:
                item = co.send(result)
            except StopIteration:
                return
            result = None
            if isinstance(item, Work):
                result = type(item).run([item])[0]
            else:
                yield item
    finally:
        co.close()

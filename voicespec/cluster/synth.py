"""``voicespec synth --ray``: the local batch writer's items, seeds and files, run on Ray Data.

The driver reads the lines and the journal exactly as the local writer does (bad lines and, on
``--resume``, finished items are settled there); the rest become a dataset mapped by a pool of
actors, each holding its loaded voices, each item synthesized by the local writer's own
:func:`~voicespec.batch.synthesize_item` and written atomically to the output folder (shared
storage on a cluster). Records stream back as items finish and are journalled at once, so the
same ``--resume`` rule holds; an item's seed comes from its line, so every file is the local
run's, byte for byte.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from voicespec.threads import DEFAULT_THREADS, use_threads
from voicespec.batch import (PROGRESS, BatchConfig, BadLine, Item, finish, open_journal, settled, synthesize_item,
                             synthesizers, target_of)


@dataclass(frozen=True)
class RayConfig:
    address: str | None = None  # None: a local Ray on this machine's cores
    workers: int | None = None  # voice-holding actors, one CPU each (None: every CPU of the cluster)
    voice: str | None = None  # the default voice (name or folder: the same path on every node)
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = DEFAULT_THREADS  # torch intra-op threads per actor: as the local run's, so the files are the same


class ItemWriter:
    """One Ray actor: synthesizes and writes the items of each batch, returns their records."""

    def __init__(self, config: BatchConfig, ray_config: RayConfig) -> None:
        use_threads(ray_config.threads)
        self.config = config
        self.synthesizer_for = synthesizers(ray_config.voice, ray_config.device, ray_config.dtype)
        self.synthesizer_for(None)  # the default voice loads once per actor, before the first item

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        records = []
        for raw in batch["item"]:
            item = Item(**json.loads(raw))
            rec = synthesize_item(item, target_of(item, self.config), self.config.options, self.synthesizer_for)
            records.append(json.dumps(rec))
        return {"record": np.array(records, dtype=object)}


def connect(config: RayConfig) -> int:
    """Join the cluster (or start a local Ray); the CPUs it has."""
    import ray

    if not ray.is_initialized():
        local = config.address is None
        env = {k: os.environ[k] for k in ("VOICESPEC_VOICES",) if k in os.environ}  # voice names resolve alike
        ray.init(address=config.address, num_cpus=os.cpu_count() if local else None, include_dashboard=False,
                 log_to_driver=False, configure_logging=False, runtime_env={"env_vars": env} if env else None)
    return int(ray.cluster_resources().get("CPU", 1))


def run_batch_ray(items: list[Item | BadLine], config: BatchConfig, ray_config: RayConfig) -> dict[str, Any]:
    """:func:`voicespec.batch.run_batch` on Ray Data; the same summary, journal and files."""
    import ray

    t0 = time.perf_counter()
    # Workers on other nodes start elsewhere: the folders they use are named absolutely, here.
    config = replace(config, out_dir=config.out_dir.resolve())
    if ray_config.voice is not None and Path(ray_config.voice).exists():
        ray_config = replace(ray_config, voice=str(Path(ray_config.voice).resolve()))
    previous = open_journal(config)
    records: list[dict[str, Any]] = []
    pending: list[Item] = []
    for item in items:
        rec = settled(item, config, previous)
        if rec is None:
            pending.append(item)
        else:
            records.append(rec)
    with (config.out_dir / PROGRESS).open("a") as journal:
        for rec in records:
            if rec["status"] != "skipped":
                journal.write(json.dumps(rec) + "\n")
        journal.flush()
        if pending:
            cpus = connect(ray_config)
            workers = max(1, min(ray_config.workers or cpus, len(pending)))
            ds = ray.data.from_items([{"item": json.dumps(asdict(i))} for i in pending],
                                     override_num_blocks=min(len(pending), 8 * workers))  # blocks to balance, not one per item
            done = ds.map_batches(ItemWriter, fn_constructor_args=(config, ray_config), batch_size=1,
                                  compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=1)
            for row in done.iter_rows():  # as items finish, in any order: journalled at once
                rec = json.loads(row["record"])
                records.append(rec)
                journal.write(json.dumps(rec) + "\n")
                journal.flush()
    return finish(records, config, time.perf_counter() - t0)

"""What several training processes agree on, in one place: who plays what and what every rank must do
equally often (the trainer and the CLI decide what only the main process writes).

A training step on W ranks (one process per GPU, or per CPU slot under gloo):

- The S sequences of a step are split across ranks, each sequence whole on one rank (`shard`): its G trials
  are one credit group, so group-relative advantages never need another rank's trials. Trial ids carry
  the sequence's global index, so no two ranks sample with the same per-turn seeds, and W ranks play
  exactly the trials (and seeds) one process plays with the same S.
- After the rollout every rank receives every rank's turns (`Ranks.gather`); credit, statistics and
  records are computed from that global rollout, identically on every rank; only the main process writes
  them.
- Collective operations must be called equally often on every rank, whatever each rank's trials did:
  - every rank pads its rows to the largest row count (`Ranks.max`), so TRL's per-row gathers match;
  - every rank cuts its rows into micro-batches of the same sizes (`common_packing`: the most rows that fit
    the token budget on every rank), so TRL's per-row gathers in the loss, DDP's gradient all-reduces and
    sharded forwards match;
  - with sharded models (ZeRO-3, FSDP) every generation call gathers parameters collectively, so every rank
    makes the same number of generation calls (`LockstepGeneration`: a rank with nothing to generate joins
    with a one-token placeholder prompt until every rank is done).
- While the main process alone works for as long as it takes (the held-out evaluation), the others wait in
  a patient barrier (`Ranks.barrier(patient=True)`: polling the process group's store), not in a
  collective, whose timeout (30 minutes by default) a long evaluation would exceed.

On one process every operation here is the identity, so a single-process run does exactly what it did.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


def _dist() -> Any:
    """torch.distributed when a process group is running, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class Ranks:
    """This process's place among the training processes, and the few collectives the trainer needs."""

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of {world_size} processes")
        self.rank, self.world_size = int(rank), int(world_size)

    @classmethod
    def current(cls) -> "Ranks":
        dist = _dist()
        if dist is None:
            return cls()
        return cls(dist.get_rank(), dist.get_world_size())

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def several(self) -> bool:
        return self.world_size > 1

    def gather(self, value: T) -> list[T]:
        """Every rank's `value`, in rank order, on every rank (pickled; small objects only)."""
        dist = _dist()
        if not self.several or dist is None:
            return [value]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def max(self, value: int) -> int:
        """The largest `value` of all ranks, on every rank."""
        return max(self.gather(int(value)))

    def total(self, value: int) -> int:
        return sum(self.gather(int(value)))

    def barrier(self, patient: bool = False) -> None:
        """Every rank waits here for the others. A plain barrier is a collective under the process group's
        timeout (30 minutes by default), past which the waiting ranks fail; `patient` waits as long
        as it takes, for work only some ranks do whose length nothing bounds (the main process's held-out
        evaluation): each rank counts itself in at the process group's store and polls it, so no collective
        is pending while it waits (`patient_barrier`)."""
        dist = _dist()
        if not (self.several and dist is not None):
            return
        if patient:
            store = _default_store(dist)
            if store is not None:
                patient_barrier(store, self.world_size)
                return
        dist.barrier()


#: patient barriers passed by this process (every rank passes them equally often: the key of the next one)
_PATIENT_BARRIERS = [0]
#: the longest pause between two looks at the store while a patient barrier waits (seconds)
PATIENT_POLL = 0.5


def _default_store(dist: Any) -> Any:
    """The key-value store the default process group was started with (torch keeps it privately), or None."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def patient_barrier(store: Any, world_size: int, poll: float = PATIENT_POLL) -> None:
    """A barrier without a deadline: this rank adds itself to the next barrier's counter in `store` and looks
    again (quickly at first, then every `poll` seconds) until all `world_size` ranks have. Each look is one
    short request, so neither the store's nor the process group's timeout runs out while the others are
    busy; a rank that died ends its launcher's job (torchrun stops the others), and a store that is gone
    raises here."""
    import time

    _PATIENT_BARRIERS[0] += 1
    key = f"skillrise/patient-barrier/{_PATIENT_BARRIERS[0]}"
    arrived = store.add(key, 1)
    pause = 0.005
    while arrived < world_size:
        time.sleep(pause)
        pause = min(poll, pause * 2)
        arrived = store.add(key, 0)


def shard(count: int, ranks: Ranks) -> list[int]:
    """The global indices (0..count-1) of the sequences this rank plays: every W-th, starting at its rank,
    so the ranks' shares differ by at most one."""
    if count < ranks.world_size:
        raise ValueError(f"{count} sequences per step for {ranks.world_size} processes: each process needs at "
                         f"least one (raise --S to at least {ranks.world_size}; S counts the sequences of all "
                         f"processes together)")
    return list(range(ranks.rank, count, ranks.world_size))


def common_packing(lengths: Sequence[Sequence[int]], budget: int) -> list[int]:
    """Rows per micro-batch, the same on every process: each process's rows (`lengths[rank]`, sorted longest
    first, the same count on every process) are cut into consecutive micro-batches of these sizes. Each
    size is the most rows that fit ``rows x longest <= budget`` on every process (at least one), so every
    process runs the same number of micro-batches with the same number of rows (TRL gathers per-row
    statistics in its loss; DDP all-reduces per backward), and none exceeds its token budget. On one
    process this is plain greedy packing."""
    counts = {len(rows) for rows in lengths}
    if len(counts) != 1:
        raise ValueError(f"every process must have the same number of rows, got {sorted(counts)}")
    total = counts.pop()
    sizes: list[int] = []
    start = 0
    while start < total:
        size = total - start
        for rows in lengths:
            longest = max(1, int(rows[start]))
            size = min(size, max(1, budget // longest))
        sizes.append(size)
        start += size
    return sizes


class LockstepGeneration:
    """A generate function whose calls every rank makes equally often (for sharded models, whose every
    forward gathers parameters from all ranks).

    Each call is a round: all ranks tell how many prompts they bring (`Ranks.total`); a rank with prompts
    generates them; a rank whose rollout ended calls `finish`, which joins every later round with a
    one-token placeholder prompt (its output is thrown away) until a round in which no rank brings prompts.
    `calls` counts this rank's generation calls, placeholders included (equal on every rank; tested)."""

    def __init__(self, generate: Callable[..., list[Any]], placeholder: Callable[[], Any], ranks: Ranks) -> None:
        self.generate, self.placeholder, self.ranks = generate, placeholder, ranks
        self.calls = 0
        self.placeholders = 0

    def __call__(self, prompts: list[str], prefixes: Sequence[str] | None = None,
                 seeds: Sequence[int] | None = None) -> list[Any]:
        if not prompts:
            raise ValueError("LockstepGeneration: a call without prompts (call finish() when done)")
        self.ranks.total(len(prompts))  # every other rank joins this round, with prompts or a placeholder
        self.calls += 1
        return self.generate(prompts, prefixes, seeds)

    def finish(self) -> None:
        """Join the other ranks' rounds with a placeholder until no rank has anything left to generate."""
        while self.ranks.total(0) > 0:
            self.calls += 1
            self.placeholders += 1
            self.placeholder()


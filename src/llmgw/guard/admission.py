"""Admission to a judge's slots, decided purely: the deadline queue, slot accounting per replica,
the shed rule and the cache-affinity pick. Times are plain floats from an injected monotonic
clock; nothing here awaits or does I/O (`judge_queue` does, around these).

- Each ready replica of a judge has as many slots as its llama-server (`--parallel`); a judgment
  runs on one slot, and no replica ever has more judgments in flight than slots: a server's
  worker processes lease the slots from one table (`judge_queue.SlotLease`), and a slot another
  process holds is `away` here.
- A judgment that finds no free slot waits in the gateway, earliest deadline first.
- A judgment is shed (failed at once as `failed_shed`) when it cannot finish in what is left of
  its budget: on arrival when the wait its place in the queue means plus the judge's recent
  service time (p90 of the last `SERVICE_SAMPLES` within `SERVICE_MEMORY_S`; a judgment that
  timed out counts with the time it had) is longer than that less `ARRIVAL_HEADROOM`; and when
  its turn comes, when what is left is shorter than the service time alone. The judge then only
  works on judgments that can still finish. A judge with nothing in flight is always tried
  (`judge_queue`), so a slow spell it has left behind does not keep it shed.
- A judgment's service time depends on how many run beside it on its replica (its occupancy):
  the slots of a llama-server share its threads, so on a CPU two at once take about twice as
  long each. Service times are kept with their occupancy and the estimates are made for the
  occupancy the judgment will run at; a queued judgment runs on a full replica.
- It also depends on how much of its prompt its slot's cache lacks: the engine's time evaluating
  the prompt is kept apart as a speed per character, and each estimate is for the judgment's own
  new characters (`ServiceTimes`).
- Every slot remembers the last prompt it was sent, which is what its KV cache holds; a
  judgment goes to the free slot sharing the longest prefix with its prompt (every judgment of a
  direction shares the judge's long fixed head; a stream's next window shares all the text
  judged before), so llama-server evaluates only what is new.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# How many recent service times the shed rule and the wait estimate look at, and for how long:
# a judge nothing was sent to for a while (everything shed) is tried again with a clean slate.
SERVICE_SAMPLES = 64
SERVICE_MEMORY_S = 60.0
# Samples taken at an occupancy needed before they speak for it alone; with fewer, every sample
# is scaled to it as if the judgments on a replica shared its compute evenly (true on a CPU,
# pessimistic on a GPU, where a few samples at the occupancy soon take over).
OWN_SAMPLES = 4


# How long the judge's prompt speed (seconds per prompt character) is remembered: a property of
# the engine and its machine rather than of the traffic, so longer than the service times, and
# kept through a spell of cached prompts that teaches it nothing (every judgment of one text
# again evaluates a token or two).
RATE_MEMORY_S = 600.0
# A judgment that evaluated fewer tokens than this says little about the speed (the engine's
# fixed costs dominate its evaluation).
RATE_MIN_TOKENS = 16


@dataclass(frozen=True)
class PromptEval:
    """What the engine said of a judgment's prompt: how long it took to evaluate the tokens its
    slot's cache lacked (`evaluated`), and how many it took from the cache."""

    seconds: float
    evaluated: int
    cached: int


def _rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _scaled(samples: Iterable[tuple[float, int]], occupancy: int) -> list[float]:
    """`samples` (value, occupancy) as they would be at `occupancy`: its own when there are
    `OWN_SAMPLES` of them, else all, scaled as if the judgments on a replica shared its compute
    evenly."""
    samples = list(samples)
    own = [v for v, k in samples if k == occupancy]
    if len(own) >= OWN_SAMPLES:
        return own
    return [v * occupancy / k for v, k in samples]


class ServiceTimes:
    """The last `size` service times of one judge (seconds from sending to the answer), each with
    its occupancy (the most judgments its replica ran at once while it ran), each forgotten
    `memory_s` after it was taken.

    A judgment's time is mostly two parts: evaluating the part of its prompt its slot's cache
    does not hold, and the rest (generating the verdict, the engine's fixed costs). When the
    engine says how long the evaluation took, the two are kept apart: the rest as a service time,
    the evaluation as seconds per character. A judgment is then expected to take the rest
    plus its own new characters at the median speed, so a run of cached judgments (a same text
    again) does not make a new text look as fast, nor a cold slot's first judgment.
    """

    def __init__(self, size: int = SERVICE_SAMPLES, memory_s: float = SERVICE_MEMORY_S,
                 rate_memory_s: float = RATE_MEMORY_S) -> None:
        # (taken at, seconds, occupancy, seconds less the prompt's evaluation when known)
        self._times: deque[tuple[float, float, int, float]] = deque(maxlen=size)
        self._rates: deque[tuple[float, float, int]] = deque(maxlen=size)  # s per character
        self._memory_s = memory_s
        self._rate_memory_s = rate_memory_s

    def add(self, seconds: float, now: float, occupancy: int = 1, *,
            prompt: PromptEval | None = None, prompt_chars: int = 0) -> None:
        """A judgment of a `prompt_chars`-character prompt took `seconds` at `occupancy`, of which
        the engine spent `prompt.seconds` evaluating what its slot's cache lacked."""
        seconds, occupancy = max(seconds, 0.0), max(occupancy, 1)
        rest = seconds
        if prompt is not None:
            spent = min(max(prompt.seconds, 0.0), seconds)
            rest = seconds - spent
            if prompt.evaluated >= RATE_MIN_TOKENS and prompt_chars > 0:
                # Per character, from the engine's own counts: seconds per evaluated token times
                # the prompt's tokens per character (what the gateway thought the cache held
                # plays no part, so a cache it misjudged does not skew the speed).
                tokens = prompt.evaluated + max(prompt.cached, 0)
                self._rates.append((now, spent / prompt.evaluated * tokens / prompt_chars,
                                    occupancy))
        self._times.append((now, seconds, occupancy, rest))

    def __len__(self) -> int:
        return len(self._times)

    def _at(self, now: float, occupancy: int, new_chars: int | None) -> list[float]:
        """The remembered service times as they would be at `occupancy`, for a judgment with
        `new_chars` new characters (None: as they were, whatever their prompts)."""
        while self._times and now - self._times[0][0] > self._memory_s:
            self._times.popleft()
        while self._rates and now - self._rates[0][0] > self._rate_memory_s:
            self._rates.popleft()
        if new_chars is None or not self._rates:
            return _scaled(((t, k) for _, t, k, _ in self._times), occupancy)
        # The median speed: it varies little from one judgment to the next, where the rest (how
        # long a verdict the judge writes) varies much; a p90 of each, added, would be a p99.
        rate = _rank(_scaled(((r, k) for _, r, k in self._rates), occupancy), 0.5)
        return [rest + new_chars * rate
                for rest in _scaled(((rest, k) for _, _, k, rest in self._times), occupancy)]

    def quantile(self, q: float, now: float, occupancy: int = 1,
                 new_chars: int | None = None) -> float:
        """Nearest-rank quantile of the samples still remembered at `now`, at `occupancy`, for
        a judgment with `new_chars` new characters; 0 with none (nothing is shed on no evidence)."""
        values = self._at(now, occupancy, new_chars)
        return _rank(values, q) if values else 0.0

    def left(self, ran: float, q: float, now: float, occupancy: int,
             new_chars: int | None = None) -> float:
        """How much longer a judgment that has run `ran` seconds at `occupancy` takes: the
        quantile of the samples longer than that, less `ran`. One already longer than every
        sample is expected to take the median again: it is slow, and nothing says how slow."""
        values = self._at(now, occupancy, new_chars)
        if not values:
            return 0.0
        longer = [t for t in values if t > ran]
        return _rank(longer, q) - ran if longer else _rank(values, 0.5)


def expected_wait(ahead: int, free: int, busy_left: Sequence[float], typical_s: float) -> float:
    """How long a judgment waits for a slot with `ahead` judgments queued before it, `free` slots
    free now, the busy slots' judgments expected to end in `busy_left` seconds, and a judgment
    taking `typical_s` (the gateway uses the p90): the judgments ahead take the slots in the
    order they free up, and each slot frees up again every `typical_s`."""
    slots = free + len(busy_left)
    if slots <= 0:
        return math.inf
    frees = sorted([0.0] * free + [max(left, 0.0) for left in busy_left])
    rounds, i = divmod(ahead, slots)
    return frees[i] + rounds * typical_s


# On arrival a judgment must be expected to finish with this share of its budget to spare: a
# wait guessed a little short then still ends in a verdict, not in a shed when its turn comes
# (late, no longer "at once") or a timeout. A quarter: with a tenth, 3 % of the sheds of the
# guard bench's 8 concurrent distinct texts still came late (a judgment's time varies with its
# text); with a quarter, under 1 %, at the same verdicts per second.
ARRIVAL_HEADROOM = 0.25


def sheds(remaining_s: float, wait_s: float, service_p90_s: float, headroom: float = 0.0) -> bool:
    """Whether a judgment with `remaining_s` of its budget left cannot finish: it would wait
    `wait_s` for a slot and then take the judge's recent service time, with `headroom` (a share
    of what is left) to spare."""
    return remaining_s * (1.0 - headroom) < wait_s + service_p90_s


def shared_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of `a` and `b` (halving, so the comparisons run
    in C on slices rather than one character at a time)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class Slot:
    """One slot of one replica: llama-server's `id_slot` `index` on replica `replica`."""

    replica: str
    index: int
    busy: bool = False  # a judgment of this process runs on it
    away: bool = False  # another process or server holds it (last time it was looked at)
    # Another server held it when this process last tried to take it: not tried again before.
    away_until: float = -math.inf
    token: str = ""  # the claim that holds it in the install's shared store, while busy
    prompt: str = ""  # the last prompt sent to it: what its KV cache holds
    used_at: float = -math.inf  # when it last finished (least recently used goes first on ties)
    started_at: float = 0.0  # when its judgment started, while busy
    occupancy: int = 1  # the most judgments its replica ran at once during its judgment
    new_chars: int = 0  # of its judgment's prompt, what its cache did not hold
    before: tuple[str, float] = ("", -math.inf)  # prompt and used_at before its claim


# Two slots whose caches share about as much of a prompt (distinct texts behind the same judge
# head differ in a few characters: "Request 12" against "Request 13") are as good as each other,
# and the one on the less busy replica runs sooner and faster: a few characters more from the
# cache are worth less than a judgment fewer beside it.
NEAR_TIE_CHARS = 32


@dataclass
class SlotBook:
    """The slots of one judge's ready replicas, and which are busy.

    A replica may run fewer judgments at once than it has slots (its `lanes`): an engine on one
    CPU thread computes one sequence at a time, and two at once cost it more per judgment than
    one after the other. Its slots still each keep their KV cache, so the pick still finds the
    slot holding the most of a prompt."""

    replicas: dict[str, list[Slot]] = field(default_factory=dict)
    lanes: dict[str, int] = field(default_factory=dict)

    def sync(self, slots_by_replica: Mapping[str, int],
             lanes_by_replica: Mapping[str, int] | None = None) -> None:
        """Follow the judge's ready replicas: new ones add their slots, gone ones drop theirs
        (a judgment still running on one gives its slot back to nothing), and a replica whose
        slot count changed keeps the slots it still has. A replica runs as many judgments at
        once as `lanes_by_replica` says (at most its slots; all of them when it does not say)."""
        for rid in list(self.replicas):
            if rid not in slots_by_replica:
                del self.replicas[rid]
        lanes = lanes_by_replica or {}
        self.lanes = {rid: max(1, min(lanes.get(rid, n), n)) for rid, n in slots_by_replica.items()}
        for rid, n in slots_by_replica.items():
            have = self.replicas.setdefault(rid, [])
            if len(have) > n:
                del have[n:]
            have.extend(Slot(rid, i) for i in range(len(have), n))

    def _open(self, rid: str, slots: list[Slot]) -> int:
        """How many more judgments replica `rid` takes now: its lanes (never more than its
        slots) less those running or held elsewhere."""
        taken = sum(1 for s in slots if s.busy or s.away)
        return max(self.lanes.get(rid, len(slots)) - taken, 0)

    def _all(self) -> Iterable[Slot]:
        return (s for slots in self.replicas.values() for s in slots)

    @property
    def total(self) -> int:
        return sum(len(s) for s in self.replicas.values())

    @property
    def busy(self) -> int:
        return sum(1 for s in self._all() if s.busy)

    @property
    def away(self) -> int:
        """Slots another process of this server holds."""
        return sum(1 for s in self._all() if s.away and not s.busy)

    @property
    def free(self) -> int:
        """Judgments the replicas take now (see `lanes`)."""
        return sum(self._open(rid, slots) for rid, slots in self.replicas.items())

    def idle(self) -> list[Slot]:
        """The slots no judgment of this process runs on."""
        return [s for s in self._all() if not s.busy]

    def in_flight(self, replica: str) -> int:
        return sum(1 for s in self.replicas.get(replica, ()) if s.busy)

    @property
    def widest(self) -> int:
        """The most judgments any replica runs at once: the occupancy of a full replica."""
        return max((min(len(s), self.lanes.get(rid, len(s))) for rid, s in self.replicas.items()),
                   default=0)

    def running(self, now: float) -> list[tuple[float, int]]:
        """How long each busy slot's judgment has run at `now`, and its new characters."""
        return [(now - s.started_at, s.new_chars) for s in self._all() if s.busy]

    @staticmethod
    def new_chars(slot: Slot, prompt: str) -> int:
        """The characters of `prompt` that `slot`'s cache lacks."""
        return len(prompt) - shared_prefix(slot.prompt, prompt)

    def uncached(self, prompt: str) -> int:
        """The characters of `prompt` that the cache of the slot sharing the most of it lacks:
        what a judgment waiting for a slot is expected to have evaluated."""
        return len(prompt) - max((shared_prefix(s.prompt, prompt) for s in self._all()), default=0)

    def pick(self, prompt: str) -> tuple[Slot, int] | None:
        """The free slot for `prompt`, and the occupancy its replica would have with it: of the
        slots whose cache shares the longest prefix with it (within `NEAR_TIE_CHARS`), the one
        on the replica with fewest in flight, then sharing most, then least recently used.
        None when every slot is busy or away, or every replica runs all it takes at once."""
        free: list[tuple[Slot, int, int]] = []  # (slot, characters shared, its replica's load)
        for rid, slots in self.replicas.items():
            if not self._open(rid, slots):
                continue
            load = sum(1 for s in slots if s.busy or s.away)
            free += [(s, shared_prefix(s.prompt, prompt), load)
                     for s in slots if not (s.busy or s.away)]
        if not free:
            return None
        longest = max(shared for _, shared, _ in free)
        slot, _, load = min((f for f in free if f[1] >= longest - NEAR_TIE_CHARS),
                            key=lambda f: (f[2], -f[1], f[0].used_at))
        return slot, load + 1

    def claim(self, slot: Slot, prompt: str, now: float) -> None:
        """Mark `slot` busy with `prompt`; every judgment on its replica now runs at least at the
        replica's new occupancy."""
        slot.before = (slot.prompt, slot.used_at)
        slot.new_chars = self.new_chars(slot, prompt)
        slot.busy, slot.prompt, slot.started_at = True, prompt, now
        siblings = self.replicas.get(slot.replica, [slot])
        occupancy = sum(1 for s in siblings if s.busy or s.away)
        slot.occupancy = occupancy
        for s in siblings:
            if s.busy:
                s.occupancy = max(s.occupancy, occupancy)

    def take(self, prompt: str, now: float = 0.0) -> Slot | None:
        """The free slot for `prompt` (see `pick`), marked busy; None when every slot is busy."""
        picked = self.pick(prompt)
        if picked is None:
            return None
        self.claim(picked[0], prompt, now)
        return picked[0]

    def give_back(self, slot: Slot, now: float) -> None:
        """`slot` is free again (its judgment answered, failed or was cancelled)."""
        slot.busy = False
        slot.used_at = now

    def unclaim(self, slot: Slot) -> None:
        """`slot` is free again and nothing was sent to it: its cache holds what it held."""
        slot.busy = False
        slot.prompt, slot.used_at = slot.before


@dataclass(order=True)
class Waiter:
    """A judgment waiting for a slot, ordered by its deadline (then by arrival)."""

    deadline: float
    seq: int
    prompt: str = field(compare=False)
    gone: bool = field(default=False, compare=False)  # cancelled, or handed a slot or a shed
    arrived: float = field(default=0.0, compare=False)
    expected_wait: float = field(default=0.0, compare=False)  # as guessed on arrival


class DeadlineQueue:
    """Judgments waiting for a slot, earliest deadline first; a cancelled one is marked gone and
    skipped when it comes up."""

    def __init__(self) -> None:
        self._heap: list[Waiter] = []
        self._seq = itertools.count()
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def push(self, deadline: float, prompt: str, arrived: float = 0.0,
             expected_wait: float = 0.0) -> Waiter:
        w = Waiter(deadline, next(self._seq), prompt, arrived=arrived, expected_wait=expected_wait)
        heapq.heappush(self._heap, w)
        self._live += 1
        return w

    def ahead_of(self, deadline: float) -> int:
        """How many waiting judgments come before one with `deadline` arriving now."""
        return sum(1 for w in self._heap if not w.gone and w.deadline <= deadline)

    def peek(self) -> Waiter | None:
        """The waiting judgment with the earliest deadline, left in place; None when none waits."""
        while self._heap and self._heap[0].gone:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None

    def drop(self, waiter: Waiter) -> None:
        """`waiter` no longer waits (cancelled)."""
        if not waiter.gone:
            waiter.gone = True
            self._live -= 1

    def pop(self) -> Waiter | None:
        """The waiting judgment with the earliest deadline, taken out; None when none waits."""
        while self._heap:
            w = heapq.heappop(self._heap)
            if not w.gone:
                w.gone = True
                self._live -= 1
                return w
        return None

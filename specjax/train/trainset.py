"""The sequences a drafter trains on, batch by batch: `TrainSet`.

    trainset = TrainSet.from_directories(data_dir, cache_dir, layers, seq_len=448)
    batch = trainset.batch(trainset.rows_at(step, batch_size, seed))

A batch row holds one sequence (a prompt and the target's response, right-padded to `seq_len`), or, packed
(`pack`, for kinds that read tokens only: a draft LM), several whole sequences one after another, each with its
own positions and a segment id that keeps attention inside it (`pack_sequences`): at ~276 tokens a sequence in
448-token rows, a third of an unpacked batch is padding.

Batch order: step s reads a slice of a seeded permutation of its epoch's training sequences (seed, epoch); packed,
the epoch's permutation is packed into rows first and step s reads `batch_size` of those rows; grouped
(`group_batches` G), each run of G batches' slices of the permutation is sorted by length and cut into G batches
again, taken in a seeded order, and each batch is only as wide as its longest sequence (rounded up to
`WIDTH_QUANTUM`). Either way a batch is a pure function of (seed, s), so a resumed run reads the batches an
uninterrupted one would.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specjax.train.data import TokenShards, load_shards
from specjax.train.features import FeatureCache, compute_features, data_sha256, open_feature_cache

__all__ = ["ANSWERS", "PACK_OPEN_ROWS", "WIDTH_QUANTUM", "TrainSet", "pack_sequences"]

ANSWERS = ("all", "greedy", "sampled")  # the kinds of answer a run may train on (`TrainSet.with_train_tokens`)
PACK_OPEN_ROWS = 16  # rows a packing keeps open for the next sequence (`pack_sequences`)
# a grouped batch's width is a multiple of this (or seq_len): a few widths, so a few compiled steps
WIDTH_QUANTUM = 64


def pack_sequences(lengths: np.ndarray, width: int, open_rows: int = PACK_OPEN_ROWS) -> list[list[int]]:
    """Rows of at most `width` tokens holding the sequences of `lengths` (each <= width), as lists of their
    indices: in the given order, each sequence goes into the first open row with room for it, else into a new
    row; once more than `open_rows` rows are open the oldest is closed. Rows come out in the order they were
    closed, then the ones still open in the order they were opened. Every sequence is in exactly one row, whole."""
    lengths = np.asarray(lengths)
    if len(lengths) and (lengths.min() < 1 or lengths.max() > width):
        raise ValueError(f"sequence lengths must be 1..{width} to pack into {width}-token rows, got "
                         f"{lengths.min()}..{lengths.max()}")
    done, rows, room = [], [], []
    for i, n in enumerate(lengths.tolist()):
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(width - n)
            if len(rows) > open_rows:
                done.append(rows.pop(0))
                room.pop(0)
    return done + rows


@dataclasses.dataclass(frozen=True)
class TrainSet:
    """Sequences (prompt + the target's response) with their cached target features.

    Fields:
      shards: the sequences (`TokenShards`: flat tokens, offsets, prompt lengths).
      features: their features (`FeatureCache`, memory-mapped or in memory), or None: computed inside each
        training step by one forward of the frozen target (`online_steps`; no cache on disk).
      layers: the feature layers a batch carries, in the drafter's order.
      seq_len: S, the padded batch width (longer sequences are cut to their first S tokens).
      valid_rows: the last `valid_rows` sequences are held out for evaluation.
      train_ids: int64[n], the training sequences, ascending (None: all but the held-out ones), so runs on
        less data or on one kind of answer (`with_train_tokens`) are evaluated on the same held-out rows.
      pack: training rows hold several whole sequences each (module docstring; `batch` then adds "positions" and
        "segments"); only for sets without feature layers (the held-out batch is never packed).
      group_batches: G > 0: each run of G batches of an epoch holds the same sequences as without it, sorted by
        length into batches of similar lengths, and a batch (the held-out one too) is only as wide as its longest
        sequence, rounded up to WIDTH_QUANTUM: at SmolLM2 data's lengths (16-row batches, G = 8) 86 % of a batch's
        positions are tokens against 61 % at the full seq_len, so a step's forwards do 0.72x the work. Each
        sequence's loss is the same; a batch's sequences are no longer a uniform draw (they share a length).
        0: plain slices of the permutation, seq_len wide. Not with `pack` (packing fills rows already).
      _epochs: a cache of the last few epochs' rows (`rows_at`), not a field to set.
      _epoch_rows: every epoch's row count so far, kept for all of them (a late step's epoch is found from the
        counts of those before it without packing them again), not a field to set.
    """

    shards: TokenShards
    features: FeatureCache | None
    layers: tuple[int, ...]
    seq_len: int
    valid_rows: int = 64
    train_ids: np.ndarray | None = None
    pack: bool = False
    group_batches: int = 0
    _epochs: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)
    _epoch_rows: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if len(self.shards) <= self.valid_rows:
            raise ValueError(f"{len(self.shards)} sequences leave nothing to train on after {self.valid_rows} "
                             f"held-out rows: generate more data or lower valid_rows")
        before = len(self.shards) - self.valid_rows
        if self.train_ids is not None and not (len(self.train_ids) and 0 <= self.train_ids.min()
                                               and self.train_ids.max() < before
                                               and np.all(np.diff(self.train_ids) > 0)):
            raise ValueError(f"train_ids must be ascending distinct sequences before the {self.valid_rows} held-out "
                             f"ones (0 to {before - 1}), at least one")
        if isinstance(self.group_batches, bool) or not isinstance(self.group_batches, (int, np.integer)) \
                or self.group_batches < 0:
            raise ValueError(f"group_batches must be an integer >= 0, got {self.group_batches!r}")
        if self.pack and self.group_batches:
            raise ValueError("group_batches sorts whole sequences into batches of similar lengths; packed rows are "
                             "full already: give one of pack and group_batches")
        if self.pack and self.layers:
            raise ValueError(f"pack puts several sequences in a row, which features of layers {self.layers} cannot "
                             f"follow: pack only a kind that reads tokens alone (a draft LM)")
        missing = [] if self.features is None else sorted(set(self.layers) - set(self.features.layers))
        if missing:
            raise KeyError(f"layers {missing} are not in the feature cache (it has {self.features.layers}); "
                           f"add them with python -m specjax.train features --layers ...")

    @classmethod
    def from_directories(cls, data_dir, cache_dir, layers: tuple[int, ...], *, seq_len: int, valid_rows: int = 64,
                         target_sha: str | None = None) -> "TrainSet":
        """A data directory (`specjax.train.data`) with its feature cache (`specjax.train.features`)."""
        shards = load_shards(data_dir)
        cache = open_feature_cache(cache_dir, target_sha=target_sha, data_sha=data_sha256(shards))
        return cls(shards, cache, tuple(layers), seq_len, valid_rows)

    @classmethod
    def online(cls, data_dir, layers: tuple[int, ...], *, seq_len: int, valid_rows: int = 64) -> "TrainSet":
        """A data directory whose features each step computes itself (`online_steps`): no feature cache."""
        return cls(load_shards(data_dir), None, tuple(layers), seq_len, valid_rows)

    @classmethod
    def from_dense(cls, target, tokens: np.ndarray, loss_mask: np.ndarray, layers: tuple[int, ...],
                   valid_rows: int = 64, temperature: np.ndarray | None = None) -> "TrainSet":
        """Dense right-padded sequences int32[N, S] whose loss mask marks each response (one run of
        True after the prompt), features computed now in memory. target: (cfg, params); temperature: float32[N],
        each answer's sampling temperature (None: all greedy)."""
        tokens, loss_mask = np.asarray(tokens), np.asarray(loss_mask, bool)
        has = loss_mask.any(axis=1)
        first = np.where(has, loss_mask.argmax(axis=1), tokens.shape[1])
        last = np.where(has, tokens.shape[1] - loss_mask[:, ::-1].argmax(axis=1), tokens.shape[1])
        flat = np.concatenate([tokens[i, :last[i]] for i in range(len(tokens))]).astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(last)]).astype(np.int64)
        shards = TokenShards(tokens=flat, offsets=offsets, prompt_lengths=first.astype(np.int32),
                             temperature=(np.zeros(len(tokens), np.float32) if temperature is None
                                          else np.asarray(temperature, np.float32)),
                             manifest={"shards": []})
        features = compute_features(target, shards, tuple(sorted(set(layers)))) if layers else None  # a draft LM: none
        return cls(shards, features, tuple(layers), tokens.shape[1], valid_rows)

    @property
    def num_train(self) -> int:
        return len(self.shards) - self.valid_rows if self.train_ids is None else len(self.train_ids)

    @property
    def training_ids(self) -> np.ndarray:
        """int64[num_train]: the training sequences (`train_ids`, or all before the held-out ones)."""
        return np.arange(self.num_train) if self.train_ids is None else self.train_ids

    @property
    def valid_ids(self) -> np.ndarray:
        """int64[valid_rows]: the held-out sequences, the directory's last ones whatever `train_ids` is."""
        return np.arange(len(self.shards) - self.valid_rows, len(self.shards))

    def response_lengths(self) -> np.ndarray:
        """int64[N]: each sequence's response tokens, as the data's manifest counts them (before any `seq_len` cut)."""
        return np.diff(self.shards.offsets) - self.shards.prompt_lengths

    def with_train_tokens(self, tokens: int | None = None, answers: str = "all", skip: int = 0,
                          exclude: np.ndarray | None = None) -> "TrainSet":
        """This set trained on the sequences from index `skip` to the held-out ones, less those in `exclude`, whose
        answers are of kind `answers` ("all", "greedy": drawn at T = 0, "sampled": at T > 0, as the data recorded
        them), and of those only the first ones holding at most `tokens` response tokens in all (None: every one);
        the held-out rows stay the same. `skip` (a prefix) and `exclude` (any sequence ids, e.g. a warm start's
        `sequences_read`) leave out answers a warm-started drafter already trained on, so a continued run reads
        only answers it has not seen. ValueError when they hold fewer tokens, or none."""
        if answers not in ANSWERS:
            raise ValueError(f"answers must be one of {', '.join(ANSWERS)}, got {answers!r}")
        before = len(self.shards) - self.valid_rows
        if isinstance(skip, bool) or not isinstance(skip, (int, np.integer)) or not 0 <= skip < before:
            raise ValueError(f"skip must be an integer from 0 to {before - 1} (the data has {before} sequences before "
                             f"its {self.valid_rows} held-out ones), got {skip!r}")
        ids = np.arange(skip, before)
        if exclude is not None:
            ids = ids[~np.isin(ids, np.asarray(exclude, np.int64))]
            if not len(ids):
                raise ValueError(f"every sequence from {skip} to the data's {self.valid_rows} held-out ones is "
                                 f"excluded (already read): generate more data")
        if answers != "all":
            sampled = self.shards.temperature[ids] > 0
            ids = ids[sampled if answers == "sampled" else ~sampled]
        if not len(ids):
            raise ValueError(f"the data has no {answers} answers between sequence {skip} and its {self.valid_rows} "
                             f"held-out sequences")
        if tokens is not None:
            cumulative = np.cumsum(self.response_lengths()[ids])
            kind = "" if answers == "all" else f"{answers} "
            if tokens > cumulative[-1]:
                raise ValueError(f"train_tokens {tokens:,} is more than the {int(cumulative[-1]):,} response tokens of "
                                 f"the {kind}answers from sequence {skip} to the data's {self.valid_rows} held-out "
                                 f"sequences: generate more data or lower it")
            ids = ids[:int(np.searchsorted(cumulative, tokens, side="right"))]
            if not len(ids):
                raise ValueError(f"train_tokens {tokens:,} holds no whole sequence (the first {kind}answer has "
                                 f"{int(cumulative[0]):,} response tokens)")
        return dataclasses.replace(self, train_ids=ids.astype(np.int64))

    def _epoch(self, epoch: int, seed: int) -> np.ndarray:
        """int64[rows, P] (packed, -1 past a row's sequences) or int64[rows] (not): epoch `epoch`'s training rows in
        order, the seeded permutation of `training_ids`, packed when `pack`; cached (the last few epochs)."""
        key = (epoch, seed)
        if key not in self._epochs:
            perm = np.random.default_rng([seed, epoch]).permutation(self.num_train)
            ids = self.training_ids[perm]
            if self.pack:
                lengths = np.minimum(self.shards.offsets[ids + 1] - self.shards.offsets[ids], self.seq_len)
                rows = pack_sequences(lengths, self.seq_len)
                table = np.full((len(rows), max(map(len, rows))), -1, np.int64)
                for r, members in enumerate(rows):
                    table[r, :len(members)] = ids[members]
                ids = table
            if len(self._epochs) >= 4:
                self._epochs.pop(next(iter(self._epochs)))
            self._epochs[key] = ids
            self._epoch_rows[key] = len(ids)
        return self._epochs[key]

    def steps_per_epoch(self, batch_size: int, seed: int, epoch: int = 0) -> int:
        """Steps in epoch `epoch` (its whole batches; packed, the count depends on the epoch's packing)."""
        if not self.pack:
            return max(1, self.num_train // batch_size)
        if (epoch, seed) not in self._epoch_rows:
            self._epoch(epoch, seed)
        return max(1, self._epoch_rows[epoch, seed] // batch_size)

    def rows_at(self, step: int, batch_size: int, seed: int) -> np.ndarray:
        """The training rows of step `step`: int64[batch_size] sequence ids, a slice of the seeded permutation of
        its epoch (of `training_ids`); packed, int64[batch_size, P], each row's sequence ids (-1 after them);
        grouped (`group_batches` G), batch j of its window of G batches sorted by length, the window's batches
        in the seeded order of (seed, epoch, window)."""
        epoch, j = 0, step
        while j >= (n := self.steps_per_epoch(batch_size, seed, epoch)):
            epoch, j = epoch + 1, j - n
        if not self.group_batches:
            return self._epoch(epoch, seed)[j * batch_size:(j + 1) * batch_size]
        g = self.group_batches
        window, first = j // g, j // g * g
        count = min(g, n - first)  # the epoch's last window may hold fewer batches
        rows = self._epoch(epoch, seed)[first * batch_size:(first + count) * batch_size]
        lengths = np.minimum(self.shards.offsets[rows + 1] - self.shards.offsets[rows], self.seq_len)
        batches = rows[np.argsort(lengths, kind="stable")].reshape(count, batch_size)
        order = np.random.default_rng([seed, epoch, window, 1]).permutation(count)
        return batches[order[j - first]]

    def batch_width(self, rows: np.ndarray) -> int:
        """The width of the batch of sequence `rows`: seq_len, or, grouped, the longest one's length rounded up to
        WIDTH_QUANTUM (at most seq_len). Computed from all of a batch's rows, so every process of a mesh, each
        building its own block of them, pads to the same width."""
        rows = np.asarray(rows)
        if not self.group_batches or rows.ndim != 1 or not len(rows):
            return self.seq_len
        return int(self._rounded(np.max(self.shards.offsets[rows + 1] - self.shards.offsets[rows])))

    def _rounded(self, lengths):
        """Sequence lengths as batch widths: rounded up to WIDTH_QUANTUM, at most seq_len (an int or an array)."""
        return np.minimum(self.seq_len, -(-lengths // WIDTH_QUANTUM) * WIDTH_QUANTUM)

    def response_tokens_of(self, rows: np.ndarray) -> int:
        """The response tokens of `rows` (`rows_at`'s ids, -1 ignored) a batch trains on: those inside `seq_len`."""
        ids = np.asarray(rows).ravel()
        ids = ids[ids >= 0]
        lengths = np.minimum(self.shards.offsets[ids + 1] - self.shards.offsets[ids], self.seq_len)
        return int(np.maximum(lengths - self.shards.prompt_lengths[ids], 0).sum())

    def tokens_seen(self, steps: int, batch_size: int, seed: int) -> np.ndarray:
        """int64[steps]: the response tokens trained on by the end of each of the first `steps` steps."""
        return np.cumsum([self.response_tokens_of(self.rows_at(s, batch_size, seed)) for s in range(steps)],
                         dtype=np.int64)

    def sequences_read(self, steps: int, batch_size: int, seed: int) -> np.ndarray:
        """int64[n]: the sorted distinct sequence ids the first `steps` steps train on (their `rows_at`)."""
        if not steps:
            return np.zeros(0, np.int64)
        rows = np.concatenate([np.asarray(self.rows_at(s, batch_size, seed)).ravel() for s in range(steps)])
        return np.unique(rows[rows >= 0]).astype(np.int64)

    def batch_widths(self, batch_size: int, seed: int, epoch: int = 0) -> tuple[int, ...]:
        """The distinct batch widths of epoch `epoch`'s steps, ascending (seq_len alone unless grouped)."""
        if not self.group_batches:
            return (self.seq_len,)
        first = sum(self.steps_per_epoch(batch_size, seed, e) for e in range(epoch))
        return self.widths_between(batch_size, seed, first, first + self.steps_per_epoch(batch_size, seed, epoch))

    def widths_between(self, batch_size: int, seed: int, first: int, last: int) -> tuple[int, ...]:
        """The distinct batch widths of steps first..last-1, ascending (seq_len alone unless grouped). Over more
        than two epochs of steps, every width the training sequences can give instead (a superset: reading every
        step of a long range is slow, and a few epochs meet nearly every width anyway)."""
        if not self.group_batches:
            return (self.seq_len,)
        if last - first > 2 * self.steps_per_epoch(batch_size, seed):  # (a grouped set is not packed: its
            ids = self.training_ids                                    # epochs are all as long)
            lengths = self.shards.offsets[ids + 1] - self.shards.offsets[ids]
            return tuple(int(w) for w in np.unique(self._rounded(lengths)))
        return tuple(sorted({self.batch_width(self.rows_at(s, batch_size, seed)) for s in range(first, last)}))

    def batch(self, rows: np.ndarray, width: int | None = None) -> dict:
        """{"tokens" int32[B, S], "loss_mask" bool[B, S], "features" f16[B, S, n, E]} of sequence rows (no
        "features" when they are computed in the step), S = `width` (None: `batch_width(rows)`; sequences longer
        than seq_len are cut to it). Packed rows (int64[B, P], `rows_at`) give no features and add "positions"
        int32[B, S] (each sequence's own, from 0) and "segments" int32[B, S] (1, 2, ... for a row's sequences, 0
        for padding): a token attends only to earlier tokens of its own segment."""
        rows = np.asarray(rows)
        if rows.ndim == 2:
            return self._packed_batch(rows)
        s = self.batch_width(rows) if width is None else width
        starts = self.shards.offsets[rows]
        lengths = np.minimum(self.shards.offsets[rows + 1] - starts, s)
        tokens = np.zeros((len(rows), s), np.int32)
        mask = np.zeros((len(rows), s), bool)
        for b, (a, n, p) in enumerate(zip(starts, lengths, self.shards.prompt_lengths[rows])):
            tokens[b, :n] = self.shards.tokens[a:a + n]
            mask[b, p:n] = True
        if self.features is None:
            return {"tokens": tokens, "loss_mask": mask}
        return {"tokens": tokens, "loss_mask": mask, "features": self.features.gather(self.layers, starts, lengths, s)}

    def _packed_batch(self, rows: np.ndarray) -> dict:
        s = self.seq_len
        out = {"tokens": np.zeros((len(rows), s), np.int32), "loss_mask": np.zeros((len(rows), s), bool),
               "positions": np.zeros((len(rows), s), np.int32), "segments": np.zeros((len(rows), s), np.int32)}
        for b, members in enumerate(rows):
            at = 0
            for segment, i in enumerate(members[members >= 0], start=1):
                a = self.shards.offsets[i]
                n = min(self.shards.offsets[i + 1] - a, s)  # (`pack_sequences` keeps a row within s)
                out["tokens"][b, at:at + n] = self.shards.tokens[a:a + n]
                out["loss_mask"][b, at + self.shards.prompt_lengths[i]:at + n] = True
                out["positions"][b, at:at + n] = np.arange(n)
                out["segments"][b, at:at + n] = segment
                at += n
        return out

    def valid_batch(self) -> dict:
        return self.batch(self.valid_ids)

    def response_token_counts(self, vocab_size: int) -> np.ndarray:
        """int64[V]: how often each id occurs in the training rows' responses (the draft vocabulary's ranking)."""
        counts = np.zeros(vocab_size, np.int64)
        for i in self.training_ids:
            a, b = self.shards.offsets[i], self.shards.offsets[i + 1]
            counts += np.bincount(self.shards.tokens[a + self.shards.prompt_lengths[i]:b], minlength=vocab_size)
        return counts

"""Packed sequences: several sequences one after another on one token axis, each attending only within itself.

BERT's and ALBERT's encoders reach this layout three ways, and run it the same way:
- **a padded batch** (a 2D attention mask with padding, `unpad` on): the real tokens are gathered, shortest sequence
  first, so the per-token steps skip the padding (`PackedSequences.of_padding`);
- **a packed row** (transformers' padding-free input, `DataCollatorWithFlattening`): no attention mask and position
  ids that restart at each sequence's first token, as transformers' masks read them (a new sequence wherever a
  position id is not its left neighbour's plus one; `PackedSequences.of_positions`);
- **the flash-attention keyword arguments** (`cu_seq_lens_q`/`cu_seq_lens_k`, `max_length_q`/`max_length_k`, from
  `DataCollatorWithFlattening(return_flash_attn_kwargs=True)`) of one packed row: the boundaries are read from them
  and the position ids restart at each (`PackedSequences.of_cu_seq_lens`).

The layout reaches the attention functions as those same keyword arguments (`attention_kwargs`), in place of a
mask: `attention_base.attend_per_sequence` runs the type's attention within each sequence. Where a call needs a
mask instead (`runs_packed`), a padded batch keeps its mask and a packed row gets a block-diagonal one
(`PackedSequences.block_mask`, the mask transformers' own models build from such position ids): the same function,
slower.

This file is copied next to every saved checkpoint (remote code): it imports only torch.
"""

import torch

FLASH_ATTENTION_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


class PackedSequences:
    """Sequences packed one after another on the token axis of a `[1, total, d]` tensor.

    `cu_seq_lens` [count + 1] (int32): where each sequence starts in the packed tensor, and `total` last (flash
    attention's cumulative lengths); `lengths`: each sequence's length (Python ints, read once per forward);
    `positions` [1, total]: each packed token's position id, where the position embeddings put it and the synthesizers
    read their tables; `shape`: (b, n) of the model's input; `indices` [total]: where each packed token sits in the
    input flattened to [b * n] (None: in order, the input is already packed); `is_row`: the input is a packed row
    (its sequences, not its rows, are what a sequence-level head answers for).
    """

    def __init__(self, lengths, positions: torch.Tensor, shape, indices: torch.Tensor | None, is_row: bool):
        self.lengths = [int(length) for length in lengths]
        device = positions.device
        starts = [0]
        for length in self.lengths:
            starts.append(starts[-1] + length)
        self.cu_seq_lens = torch.tensor(starts, dtype=torch.int32, device=device)
        self.positions = positions
        self.shape = tuple(shape)
        self.indices = indices
        self.is_row = is_row

    @classmethod
    def of_padding(cls, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None) -> "PackedSequences":
        """The real tokens of a padded batch: a 2D mask [b, n] (1 or True: a real token) and the batch's position ids
        [b or 1, n] (None: each token's column, as the position embeddings count them). Shortest sequence first, so
        sequences of one length sit side by side and share one attention call; an empty row is skipped."""
        b, n = attention_mask.shape
        real = attention_mask.bool()
        lengths = real.sum(-1)  # [b]
        order = torch.argsort(lengths, stable=True)
        rows, columns = real[order].nonzero(as_tuple=True)  # row-major: each sequence's tokens in order
        indices = order[rows] * n + columns  # [total]
        if position_ids is None:
            positions = columns[None]
        else:
            positions = position_ids.expand(b, n).reshape(-1)[indices][None]
        return cls([x for x in lengths[order].tolist() if x > 0], positions, (b, n), indices, is_row=False)

    @classmethod
    def of_positions(cls, position_ids: torch.Tensor, batch: int) -> "PackedSequences | None":
        """The sequences of packed rows, from their position ids [b or 1, n]: a sequence starts at each row's first
        token and wherever a position id is not its left neighbour's plus one (transformers' rule). None where every
        row holds one sequence."""
        positions = position_ids.expand(batch, -1)
        starts = torch.ones_like(positions, dtype=torch.bool)
        starts[:, 1:] = positions[:, 1:] - positions[:, :-1] != 1
        if not bool(starts[:, 1:].any()):
            return None
        first = starts.reshape(-1).nonzero().squeeze(1)
        lengths = torch.diff(first, append=first.new_tensor([starts.numel()]))
        return cls(lengths.tolist(), positions.reshape(1, -1), positions.shape, None, is_row=True)

    @classmethod
    def of_cu_seq_lens(cls, kwargs: dict, shape, position_ids: torch.Tensor | None) -> "PackedSequences":
        """The sequences of one packed row [1, total] that the flash-attention keyword arguments describe, checked.
        Their position ids restart at 0 at each sequence where `position_ids` are not given; given, they must restart
        exactly at the sequences' starts."""
        cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
        cu = cu_q if cu_q is not None else cu_k
        fix = "pass cu_seq_lens_q and cu_seq_lens_k of the packed row as DataCollatorWithFlattening makes them"
        if cu_q is not None and cu_k is not None and not torch.equal(cu_q.long(), cu_k.long()):
            raise ValueError(f"Self-attention over packed sequences needs cu_seq_lens_q == cu_seq_lens_k: {fix}.")
        b, n = shape
        if b != 1:
            raise ValueError(
                f"`cu_seq_lens_q`/`cu_seq_lens_k` describe one packed row, but the input has {b} rows: pass the "
                "sequences packed into input_ids of shape [1, total] (DataCollatorWithFlattening), or drop the "
                "cumulative lengths and pass an attention mask."
            )
        cu = cu.long().reshape(-1)
        lengths = torch.diff(cu)
        if cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != n or bool((lengths <= 0).any()):
            raise ValueError(
                f"`cu_seq_lens` must rise strictly from 0 to the row's length {n}; got {cu.tolist()}: {fix}."
            )
        longest = int(lengths.max())
        for name in ("max_length_q", "max_length_k"):
            given = kwargs.get(name)
            if given is not None and int(given) < longest:
                raise ValueError(f"`{name}`={int(given)} is shorter than the longest packed sequence ({longest}).")
        starts = torch.repeat_interleave(cu[:-1], lengths)
        restarting = torch.arange(n, device=cu.device) - starts
        if position_ids is None:
            positions = restarting[None]
        else:
            positions = position_ids.reshape(1, -1)
            found = cls.of_positions(positions, 1)
            found_starts = [0] if found is None else found.cu_seq_lens.tolist()[:-1]
            if found_starts != cu[:-1].tolist():
                raise ValueError(
                    f"`position_ids` restart at {found_starts} but `cu_seq_lens` start sequences at "
                    f"{cu[:-1].tolist()}: pass the position ids of the same packing, or leave them out (each "
                    "sequence then counts from 0)."
                )
        return cls(lengths.tolist(), positions, (b, n), None, is_row=True)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[b, n, ...] -> the packed tokens [1, total, ...]."""
        if self.indices is None:
            return x.reshape(1, -1, *x.shape[2:])
        return x.flatten(0, 1).index_select(0, self.indices)[None]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[1, total, ...] -> [b, n, ...]: the tokens back where they were, zeros at a padded batch's padding."""
        if self.indices is None:
            return packed.reshape(*self.shape, *packed.shape[2:])
        flat = packed.new_zeros(self.shape[0] * self.shape[1], *packed.shape[2:])
        return flat.index_copy(0, self.indices, packed[0]).view(*self.shape, *packed.shape[2:])

    def first_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Each packed sequence's first token, [count, d], from the hidden states of a packed row's input [b, n, d]."""
        return hidden_states.reshape(-1, hidden_states.shape[-1]).index_select(0, self.cu_seq_lens[:-1].long())

    def block_mask(self, causal: bool = False) -> torch.Tensor:
        """A packed row's mask for the mask path, [b, 1, n, n] boolean (True: attend): each token attends to the
        tokens of its own sequence (and, `causal`, to those up to itself), as transformers' masks keep packed
        sequences apart."""
        b, n = self.shape
        lengths = torch.tensor(self.lengths, device=self.positions.device)
        sequence = torch.repeat_interleave(torch.arange(len(self.lengths), device=lengths.device), lengths).view(b, n)
        mask = sequence[:, :, None] == sequence[:, None, :]
        if causal:
            mask = mask & torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
        return mask[:, None]

    def attention_kwargs(self) -> dict:
        """The layout as the attention functions take it: transformers' flash-attention keyword arguments, and the
        packed tokens' positions as the keys' positions (`key_positions`, read by the synthesizers)."""
        longest = max(self.lengths)
        cu = self.cu_seq_lens
        return dict(
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=longest,
            max_length_k=longest,
            key_positions=self.positions,
        )


def packed_row(attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, shape, kwargs: dict):
    """The sequences of a packed row input, and the position ids its embeddings read: from the flash-attention
    keyword arguments (taken out of `kwargs`: the encoder passes its own layout on) or from position ids that
    restart; (None, position_ids) for any other input. A packed row comes without padding: a mask with padding beside
    the cumulative lengths is refused, an all-ones one dropped."""
    given = {name: kwargs.pop(name) for name in FLASH_ATTENTION_KWARGS if kwargs.get(name) is not None}
    if given.keys() & {"cu_seq_lens_q", "cu_seq_lens_k"}:
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError(
                "Both an attention mask with padding and `cu_seq_lens` were given: a packed row has no padding. "
                "Pass one of them."
            )
        row = PackedSequences.of_cu_seq_lens(given, shape, position_ids)
        return row, row.positions.view(shape)
    if attention_mask is None and position_ids is not None:
        return PackedSequences.of_positions(position_ids, shape[0]), position_ids
    return None, position_ids


def runs_packed(config, attention_mask: torch.Tensor | None, row: PackedSequences | None, kwargs: dict) -> bool:
    """Whether an encoder runs its layers on packed sequences (`encoder_layout`): `config.unpad` is on, the model is
    an encoder (not `is_decoder`: its causal mask and cache need the mask path), the graph is not traced
    (`torch.compile`, `torch.export`, `torch.jit`: the packed shapes depend on the input's values), no attention
    weights are asked for (they are [b, heads, n, n]), and the input is a packed row (every layer's hidden states are
    then the packed row's own, where it is one row) or a padded batch with padding and at least one real token (every
    layer's hidden states keep the padded batch's shape, so asking for them runs the padded batch)."""
    hidden_states = kwargs.get("output_hidden_states", getattr(config, "output_hidden_states", False))
    if (
        not config.unpad
        or getattr(config, "is_decoder", False)
        or kwargs.get("output_attentions", getattr(config, "output_attentions", False))
        or torch.compiler.is_compiling()
        or torch.jit.is_tracing()
    ):
        return False
    if row is not None:
        return not hidden_states or row.shape[0] == 1
    return not (
        hidden_states
        or attention_mask is None
        or attention_mask.dim() != 2
        or bool(attention_mask.bool().all())
        or not bool(attention_mask.bool().any())  # no real token at all: the padded batch, as transformers runs it
    )


def encoder_layout(config, attention_mask, position_ids, row: PackedSequences | None, kwargs: dict):
    """The packed sequences an encoder's layers run on (`runs_packed`), or None where they run with a mask."""
    if not runs_packed(config, attention_mask, row, kwargs):
        return None
    return row if row is not None else PackedSequences.of_padding(attention_mask, position_ids)

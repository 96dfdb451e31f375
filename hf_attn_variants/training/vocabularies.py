"""The project tokenizers' vocabularies, learnt from word counts alone, so that the same text gives the same
vocabulary in any process on any machine (`tokenizers`' own trainers iterate hash maps seeded afresh in every
process): `wordpiece_vocabulary` (the byte-pair merges of `WordPieceTrainer`) and `unigram_vocabulary`
(SentencePiece's Unigram: EM over each word's segmentation lattice, then pruning). `tokenizer_training` hands them to
`tokenizers`' models with the families' normalizers and special tokens.
"""

from array import array
from collections import Counter

import numpy as np


def wordpiece_vocabulary(
    word_counts: dict[str, int], vocab_size: int, special: list[str], prefix: str = "##"
) -> list[str]:
    """The WordPiece vocabulary (token of each id, in id order) that `tokenizers`' `WordPieceTrainer` learns, computed
    so that it depends on the word counts alone: the special tokens, then every character of the words, then
    `prefix` + every character that continues a word (each in code-point order), then the merges, most frequent pair
    first (`WordPieceTrainer` is byte-pair merging with a continuation prefix), a tie going to the pair of smallest
    ids (as `BpeTrainer` breaks ties).

    Why not `WordPieceTrainer` itself: it numbers the continuation characters in the iteration order of a Rust
    `HashMap` of the words, which is seeded afresh in every process, and ties between equally frequent pairs are
    broken by those numbers; so two trainings on the same text give different vocabularies (different tokens, ids
    permuted), whatever `TOKENIZERS_PARALLELISM` or `RAYON_NUM_THREADS` say."""
    import heapq
    from collections import defaultdict

    words = sorted(word_counts)
    tokens = list(dict.fromkeys(special))
    tokens += sorted({c for w in words for c in w} - set(tokens))
    tokens += sorted({prefix + c for w in words for c in w[1:]} - set(tokens))
    ids = {t: i for i, t in enumerate(tokens)}
    counts = [word_counts[w] for w in words]
    symbols = [[ids[w[0]]] + [ids[prefix + c] for c in w[1:]] for w in words]  # each word as token ids
    pair_counts, where = defaultdict(int), defaultdict(set)  # (a, b) -> occurrences; -> the words holding it
    for i, word in enumerate(symbols):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    heap = [(-count, pair) for pair, count in pair_counts.items()]  # max count first, then the smallest pair
    heapq.heapify(heap)
    while len(tokens) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if -negative != pair_counts[pair]:  # stale: the pair's count changed since it was pushed; queue it anew
            if pair_counts[pair] > 0:
                heapq.heappush(heap, (-pair_counts[pair], pair))
            continue
        a, b = pair
        merged = tokens[a] + tokens[b].removeprefix(prefix)
        if merged not in ids:
            ids[merged] = len(tokens)
            tokens.append(merged)
        new, grown = ids[merged], set()
        for i in sorted(where.pop(pair)):
            word, out, j = symbols[i], [], 0
            while j < len(word):
                if j + 1 < len(word) and word[j] == a and word[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(word[j])
                    j += 1
            if len(out) == len(word):
                continue
            for old in zip(word, word[1:]):
                pair_counts[old] -= counts[i]
            for added in zip(out, out[1:]):
                pair_counts[added] += counts[i]
                where[added].add(i)
                grown.add(added)
            symbols[i] = out
        for added in grown - {pair}:
            if pair_counts[added] > 0:
                heapq.heappush(heap, (-pair_counts[added], added))
    return tokens


def _digamma(x: np.ndarray) -> np.ndarray:
    """The digamma function (elementwise, x > 0): recurrence up to 7, then its asymptotic series (the expansion
    SentencePiece's and `tokenizers`' Unigram trainers use)."""
    x, result = np.array(x, dtype=np.float64), np.zeros(np.shape(x))
    while (small := x < 7).any():
        result[small] -= 1 / x[small]
        x[small] += 1
    x -= 0.5
    xx2 = 1 / (x * x)
    xx4 = xx2 * xx2
    return result + np.log(x) + xx2 / 24 - 7 / 960 * xx4 + 31 / 8064 * xx4 * xx2 - 127 / 30720 * xx4 * xx4


class _Lattices:
    """Every segmentation of each of `strings` into pieces of `ids` (piece string -> index), as one graph: a node per
    position of each string, an edge (src -> dst, piece) per occurrence of a piece. Forward-backward, Viterbi and the
    expected piece counts run over all strings at once, position by position; `select` restricts the edges to the
    live pieces. The edges are kept in a fixed order (by string, then position), so every sum is taken in the same
    order in any process. Viterbi ties go to the path whose last piece is longest (as `tokenizers`' Unigram)."""

    def __init__(self, strings: list[str], ids: dict[str, int], max_length: int, whole: bool = True):
        table = {piece[:i]: -1 for piece in ids for i in range(1, len(piece))} | ids  # prefix -> piece, or -1
        lengths = np.array([len(s) for s in strings], dtype=np.int64)
        self.first = np.cumsum(lengths + 1) - (lengths + 1)  # node of each string's position 0
        self.last = self.first + lengths  # node of each string's end
        self.nodes = int(np.sum(lengths + 1))
        src, dst, piece, owner = (array("q") for _ in range(4))  # compact: large texts have millions
        for k, string in enumerate(strings):
            base, n = int(self.first[k]), len(string)
            for i in range(n):
                for j in range(i + 1, min(n, i + max_length) + 1):
                    p = table.get(string[i:j])
                    if p is None:  # no piece starts so
                        break
                    if p >= 0 and (whole or j - i < n):  # whole=False: a string's own piece is left out
                        src.append(base + i)
                        dst.append(base + j)
                        piece.append(p)
                        owner.append(k)
        self.src, self.dst, self.piece, self.owner = (
            np.frombuffer(a, dtype=np.int64) if a else np.zeros(0, np.int64) for a in (src, dst, piece, owner)
        )
        self.position = self.dst - self.first[self.owner]  # of each edge's end
        self.start = self.src - self.first[self.owner]  # of each edge's start
        # the sweeps' orders: forward by end position, end node, then start (longest piece first); backward by start
        # position, descending, then start node and end
        self.forward_order = np.lexsort((self.src, self.dst, self.position))
        self.backward_order = np.lexsort((self.dst, self.src, -self.start))

    def select(self, alive: np.ndarray):
        """Use only the edges of live pieces."""
        keep = alive[self.piece]
        self.edges = np.flatnonzero(keep)
        self.forward = self._steps(self.forward_order[keep[self.forward_order]], self.src, self.dst, self.position)
        self.backward = self._steps(self.backward_order[keep[self.backward_order]], self.dst, self.src, self.start)

    def _steps(self, order, source, target, level):
        """The sweep over the edges in `order`, a step per `level` (a position): (the edges, their source nodes,
        their pieces, the first edge of each target node's group, those target nodes)."""
        nodes = target[order]
        heads = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]]) if len(order) else order
        cuts = np.flatnonzero(np.r_[True, level[order][1:] != level[order][:-1]]) if len(order) else order
        steps = []
        for a, b in zip(cuts, np.r_[cuts[1:], len(order)]):
            h = heads[np.searchsorted(heads, a) : np.searchsorted(heads, b)]
            steps.append((order[a:b], source[order[a:b]], self.piece[order[a:b]], h - a, nodes[h]))
        return steps

    def _sweep(self, steps, begin, scores, best_only=False):
        """Forward (or backward) over `steps` from the nodes `begin`: each node's log-sum over its paths (Viterbi: its
        best path's score, and the last edge of that path)."""
        values = np.full(self.nodes, -np.inf)
        values[begin] = 0.0
        back = np.zeros(self.nodes, dtype=np.int64)
        for edges, source, piece, heads, nodes in steps:
            v = values[source] + scores[piece]
            top = np.maximum.reduceat(v, heads)
            sizes = np.diff(np.r_[heads, len(v)])
            if best_only:
                is_top = v == np.repeat(top, sizes)
                back[nodes] = edges[np.minimum.reduceat(np.where(is_top, np.arange(len(v)), len(v)), heads)]
                values[nodes] = top
            else:
                values[nodes] = top + np.log(np.add.reduceat(np.exp(v - np.repeat(top, sizes)), heads))
        return values, back

    def expected_counts(self, scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The expected number of occurrences of each piece (forward-backward), each string weighted by its count."""
        alpha, _ = self._sweep(self.forward, self.first, scores)
        beta, _ = self._sweep(self.backward, self.last, scores)
        e = self.edges
        log_marginal = alpha[self.src[e]] + scores[self.piece[e]] + beta[self.dst[e]] - alpha[self.last][self.owner[e]]
        return np.bincount(self.piece[e], counts[self.owner[e]] * np.exp(log_marginal), minlength=len(scores))

    def viterbi(self, scores: np.ndarray):
        """(best score of each string, -inf for a string left out; the pieces of the best segmentations as (string,
        piece) arrays, string after string, each left to right)."""
        best, back = self._sweep(self.forward, self.first, scores, best_only=True)
        start, owner, piece = [], [], []
        node = self.last.copy()
        todo = np.flatnonzero((node != self.first) & (best[self.last] > -np.inf))  # strings left out: none
        while len(todo):
            e = back[node[todo]]
            start.append(self.src[e])
            owner.append(todo)
            piece.append(self.piece[e])
            node[todo] = self.src[e]
            todo = todo[node[todo] != self.first[todo]]
        if not start:
            return best[self.last], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        order = np.argsort(np.concatenate(start), kind="stable")  # nodes rise along a string and string to string
        return best[self.last], np.concatenate(owner)[order], np.concatenate(piece)[order]


def _unigram_seeds(
    word_counts: dict[str, int], max_piece_length: int, seed_size: int
) -> tuple[list[str], int, np.ndarray]:
    """The seed pieces of `unigram_vocabulary`, the characters first: (pieces, number of characters, weights).

    Every character of the words, in code-point order, weighted by its occurrences in the text; then the `seed_size`
    substrings of 2 to `max_piece_length` characters that occur at least twice in the distinct words, weighted by
    those occurrences x length (as SentencePiece's suffix array over the distinct words counts them), largest
    first (a tie going to the smaller string)."""
    occurrences, in_text = Counter(), Counter()  # substring -> in the distinct words; character -> in the text
    for word in sorted(word_counts):
        for i, c in enumerate(word):
            in_text[c] += word_counts[word]
            occurrences.update(word[i:j] for j in range(i + 2, min(len(word), i + max_piece_length) + 1))
    chars = sorted(in_text)
    weight = {piece: n * len(piece) for piece, n in occurrences.items() if n >= 2}
    substrings = sorted(weight, key=lambda piece: (-weight[piece], piece))[:seed_size]
    seed_weight = np.array([in_text[c] for c in chars] + [weight[p] for p in substrings], dtype=float)
    return chars + substrings, len(chars), seed_weight


def unigram_vocabulary(
    word_counts: dict[str, int],
    vocab_size: int,
    max_piece_length: int = 16,
    seed_size: int = 1_000_000,
    shrinking_factor: float = 0.75,
    sub_iterations: int = 2,
) -> list[tuple[str, float]]:
    """The Unigram language model (Kudo 2018) of `word_counts` as SentencePiece's and `tokenizers`' UnigramTrainer
    learn it, computed so that it depends on the word counts alone: `vocab_size` (piece, log-probability) pairs,
    highest score first (a tie going to the smaller string); fewer only when the words hold fewer substrings.

    - Seeds (`_unigram_seeds`): every character, and the `seed_size` most frequent longer substrings; initial
      scores the log of their weights, normalised.
    - EM, `sub_iterations` times a round: the expected count of each piece by forward-backward over each distinct
      word's lattice, weighted by the word's count; the M-step is SentencePiece's Bayesian one, score =
      digamma(count) - digamma(total), a count under 0.5 taken as 0.5.
    - Pruning, while more than 1.1 x `vocab_size` pieces are left: drop the substrings no word's Viterbi
      segmentation uses, and of the others keep those whose removal would cost the most likelihood (SentencePiece's
      estimate: each occurrence re-segmented by the piece's best segmentation without itself), a `shrinking_factor`
      share of the pieces a round and never fewer than 1.1 x `vocab_size`; then an EM round. Last, one pruning to
      `vocab_size` and an EM round. Characters are never pruned.

    Why not `tokenizers`' UnigramTrainer: its results depend on the iteration order of Rust `HashMap`s seeded afresh
    in every process (scores differ in the fourth decimal, a few pieces change places), whatever
    `TOKENIZERS_PARALLELISM` or `RAYON_NUM_THREADS` say. Here every loop runs over sorted words and pieces, every
    sum in a fixed order, and the scores are rounded to 1e-6, so that the last bits of a platform's exp/log do not
    reach the file."""
    words = sorted(word_counts)
    counts = np.array([word_counts[w] for w in words], dtype=np.float64)
    pieces, n_chars, seed_weight = _unigram_seeds(word_counts, max_piece_length, seed_size)
    if n_chars > vocab_size:
        raise ValueError(
            f"The text has {n_chars} distinct characters, each of which must be a piece, but only "
            f"{vocab_size} pieces were asked for: use a larger vocabulary (--vocab_size, which also "
            "holds T5's 103 special tokens)."
        )
    ids = {piece: i for i, piece in enumerate(pieces)}
    scores = np.log(seed_weight) - np.log(seed_weight.sum())
    name_rank = np.empty(len(pieces), dtype=np.int64)  # ties are broken by the piece string
    name_rank[np.argsort(np.array(pieces, dtype=object), kind="stable")] = np.arange(len(pieces))
    lattices = _Lattices(words, ids, max_piece_length)
    alive = np.ones(len(pieces), dtype=bool)

    def em():
        lattices.select(alive)
        for _ in range(sub_iterations):
            expected = lattices.expected_counts(scores, counts)[alive]
            scores[alive] = _digamma(np.maximum(expected, 0.5)) - _digamma(expected.sum())

    def prune(floor):
        """Keep the characters and the most useful substrings: a `shrinking_factor` share of the pieces, fewer
        where fewer are used, never fewer than `floor`."""
        lattices.select(alive)
        _, owner, piece = lattices.viterbi(scores)
        freq = np.bincount(piece, counts[owner], minlength=len(pieces))  # occurrences in the Viterbi segmentations
        total = freq.sum()
        used = np.flatnonzero(alive & (freq > 0))
        used = used[used >= n_chars]  # the substrings (the characters, never pruned, come first)
        # each used substring's best segmentation without itself
        alternatives = _Lattices(
            [pieces[i] for i in used], {pieces[i]: i for i in np.flatnonzero(alive)}, max_piece_length, whole=False
        )
        alternatives.select(alive)
        alt_best, alt_owner, alt_piece = alternatives.viterbi(scores)
        own = freq[used]
        splits = np.bincount(alt_owner, minlength=len(used))
        alt_logprob = np.bincount(
            alt_owner,
            np.log(freq[alt_piece] + own[alt_owner]) - np.log(total + own[alt_owner] * (splits[alt_owner] - 1)),
            minlength=len(used),
        )
        useful = np.zeros(len(pieces), dtype=bool)  # used, and its own best segmentation
        useful[used] = alt_best <= scores[used]
        loss = np.zeros(len(pieces))
        loss[used] = own / counts.sum() * (np.log(own) - np.log(total) - alt_logprob)
        candidates = np.flatnonzero(alive)[n_chars:]  # the characters are always alive
        ranked = candidates[
            np.lexsort(
                (
                    name_rank[candidates],
                    np.where(useful[candidates], -loss[candidates], -scores[candidates]),
                    ~useful[candidates],
                )
            )
        ]
        size = max(floor, min(int(alive.sum() * shrinking_factor), n_chars + int(useful.sum())))
        alive[ranked[size - n_chars :]] = False

    em()
    while alive.sum() > vocab_size * 11 // 10:
        prune(vocab_size * 11 // 10)
        em()
    if alive.sum() > vocab_size:
        prune(vocab_size)
        em()
    final = np.flatnonzero(alive)
    final = final[np.lexsort((name_rank[final], -np.round(scores[final], 6)))]
    return [(pieces[i], float(np.round(scores[i], 6))) for i in final]

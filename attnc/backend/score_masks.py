"""The DSL's insertion point on sm_80: score_mod and the element mask, applied to S while
it is in registers, between the QK^T MMAs and the online softmax (design.md section 4).

Scores are handled by accumulator row: rows[r][c] with r = 2*mi + half (MMA row tile mi,
rows g and g+8) and c = 2*nj + x (n8 atom nj, columns 2t and 2t+1). `ElementCoords`
gives each one's global (i, j).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from attnc.backend.hooks import RegionCode
from attnc.backend.mask_hooks import KeepFn, RowIntervalFn, ScoreBiasFn, ScoreModFn
from attnc.backend.nvgpu_builders import Emit, branches, warp_vote
from attnc.backend.row_bits import WORD, RowBits, below, low_bits
from attnc.backend.warp_diagonals import diagonals_across_warp, lane_values
from attnc.errors import AttncError


# The unit attribute on the scf.if whose condition holds beyond the flat diagonals and
# whose else side computes the hook's values per diagonal (HookGrid.over, offset_over):
# Note [Spills of the near tiles] in register_bound.py.
NEAR_TILES = "attnc.near_tiles"


def rows_of(acc) -> list[list]:
    """acc[mi][nj][2*half + x] -> rows[2*mi + half][2*nj + x]."""
    return [[atom[2 * half + x] for atom in acc[mi] for x in (0, 1)]
            for mi in range(len(acc)) for half in (0, 1)]


class ElementCoords:
    """Global query/key indices of the accumulator elements a lane holds: row g (+8,
    +atom_rows per row tile), columns 2t, 2t+1 (+8 per atom) of its warp's slice."""

    # Across a warp, the first column 2t of a lane less its first row g (t = lane % 4,
    # g = lane // 4) runs from -7 to 6: `lane_diagonal`'s spread.
    SPREAD = 13

    def __init__(self, e: Emit, first_row, first_col, block_n: int, key0=None, atom_rows: int = 16,
                 lane=None):
        self.e = e
        self.atom_rows = atom_rows      # rows from one 16-row MMA tile of the warp to its next
        self.first_row, self.first_col = first_row, first_col
        self.block_n = block_n
        self.key0 = key0        # key block n starts at key0 + n * block_n (None: 0)
        self.lane = lane        # the lane's index in its warp, where the caller gives it

    def lane_diagonal(self) -> tuple | None:
        """(the lane's index, the j - i of its first score less the least of its warp's,
        SPREAD: the most that difference is), or None without the lane's index (Note
        [Diagonals across the warp] in warp_diagonals.py)."""
        if self.lane is None:
            return None
        e = self.e
        return self.lane, e.add(e.sub(self.first_col, e.shr(self.lane, 2)), 7), self.SPREAD

    def block_start(self, n_block, add=None):
        """The first key of block n_block; `add`: the Emit's add that offsets it by key0."""
        first = self.e.mul(n_block, self.block_n)
        return first if self.key0 is None else (add or self.e.add)(first, self.key0)

    def block_end(self, n_block):
        """The key after block n_block's last."""
        end = self.e.mul(self.e.add(n_block, 1), self.block_n)
        return end if self.key0 is None else self.e.add(end, self.key0)

    @staticmethod
    def column(c: int) -> int:
        """The lane's column c as a constant offset from its first one (c = 0)."""
        nj, x = divmod(c, 2)
        return 8 * nj + x

    def __call__(self, r: int, c: int, n_block, nsw: bool = False):
        """(i, j) of row r, column c; `nsw`: j's adds cannot wrap (0 <= j < N, Note
        [Indices known in range] in hooks.py), which lets LLVM fold column offsets into
        addresses."""
        return self.row(r), self.key(c, n_block, nsw)

    def row(self, r: int):
        """i of row r."""
        return self.e.add(self.first_row, self.row_offset(r))

    def row_offset(self, r: int) -> int:
        """The lane's row r as a constant offset from its first one (r = 0)."""
        mi, half = divmod(r, 2)
        return self.atom_rows * mi + 8 * half

    def diagonal(self, r: int, c: int) -> int:
        """j - i of row r, column c, less the lane's first (Note [Values of a diagonal])."""
        return self.column(c) - self.row_offset(r)

    def key(self, c: int, n_block, nsw: bool = False):
        """j of column c in block n_block (`nsw` as in `__call__`)."""
        add = self.e.add_nsw if nsw else self.e.add
        return add(add(self.block_start(n_block, add), self.first_col), self.column(c))



class HookGrid:
    """A hook over the scores of a tile of rows (Note [Hoisted hook values] in hooks.py):
    its values that depend on b and h only, on one row's i (`row_i(r)`) or on one
    column's j (`col_j(c)`) emitted here, once each; `grid(r, c, *args)` calls it for
    the score at row r, column c with them. A hook that is not a region (the built-in
    masks) is called as it is."""

    def __init__(self, hook, e: Emit, b, h, rows: int, cols: int, row_i, col_j, j_below_n: bool = False,
                 diagonal=None, flat: bool = False, lanes=None):
        self.hook, self.e = hook, e
        self.rows = self.cols = None
        self.diagonal, self.diagonals = diagonal, None     # {key: values} of the diagonals, where shared
        self.far = None                                 # Note [Flat diagonals]: see `over`
        code = getattr(hook, "__self__", hook)         # a RegionCode or a bound method of one
        if not isinstance(code, RegionCode):
            return
        outer, self.rows, self.cols = code.hoist_tile(e, b, h, rows, row_i, cols, col_j,
                                                      lambda j: code.known_in_range(j, j_below_n))
        if diagonal is not None and code.diagonal is not None:      # Note [Values of a diagonal]
            spots: dict = {}
            for r in range(rows):
                for c in range(cols):
                    spots.setdefault(diagonal(r, c), (r, c))
            # Note [Diagonals across the warp]: near the flat diagonals, the warp's far test
            # and a few diagonals a lane
            moved = lane_values(code) if flat and lanes is not None and code.flat_diagonals is not None else None
            across = lanes() if moved is not None else None
            far = code.far_test(e, spots, row_i, col_j, across[1:] if across else None) if flat else None
            if across is not None:
                far = (warp_vote(e, far[0], "all"), far[1])     # the same in every lane; ptxas learns it
                self.per_diagonal = lambda: diagonals_across_warp(code, e, outer, spots, row_i(0), col_j(0),
                                                                  moved, *across)
            else:
                self.per_diagonal = lambda: {k: code.hoist_diagonal(e, outer, row_i(r), col_j(c))
                                             for k, (r, c) in spots.items()}
            if far is None:
                self.diagonals = self.per_diagonal()
            else:
                self.far, d0 = far
                self.once = lambda: dict.fromkeys(spots, code.hoist_at(e, outer, d0))

    def over(self, scores: list[list[ir.Value]], apply) -> list[list[ir.Value]]:
        """`apply(self)`: the tile's scores as the hook makes them; beyond the flat
        diagonals (`far`, Note [Flat diagonals] in attnc/ir/diagonals.py), with the values of
        the diagonal computed once, in a branch of their own -- which yields the scores, so
        that no value of a diagonal stays live past it."""
        if self.far is None:
            return apply(self)

        def side(diagonals):
            def scored():
                self.diagonals = diagonals()
                return apply(self)
            return scored
        return _branch(scores, self.far, side(self.once), side(self.per_diagonal), NEAR_TILES)

    def offset_over(self, scores: list[list[ir.Value]], apply, value) -> tuple[list[list[ir.Value]], ir.Value | None]:
        """`over` for a hook with one value per far tile (Note [Offsets of far tiles] in
        softmax.py): (the scores, the offset the softmax adds to each). Beyond the flat
        diagonals the scores are left as they are and the offset is `value(self)`; on
        them the scores are `apply(self)` and the offset is 0; None without a far test."""
        if self.far is None:
            return apply(self), None

        def far():
            self.diagonals = self.once()
            return scores, [value(self)]

        def near():
            self.diagonals = self.per_diagonal()
            return apply(self), [self.e.cf(0.0)]
        rows, (offset,) = _branch_with(scores, self.far, far, near, [self.e.f32], NEAR_TILES)
        return rows, offset

    def __call__(self, r: int, c: int, *args, **kwargs):
        if self.rows is not None:
            kwargs["given"] = {**self.rows[r], **self.cols[c]} if self.cols[c] else self.rows[r]
            if self.diagonals is not None:
                kwargs["given"] = {**kwargs["given"], **self.diagonals[self.diagonal(r, c)]}
        return self.hook(self.e, *args, **kwargs)


class ScoreMasker:
    """Applies `score_mod` or `score_bias` (every tile) and keep-or--inf (partial tiles)
    to score rows."""

    def __init__(self, e: Emit, coords: ElementCoords, b, h, scale: float,
                 score_mod: ScoreModFn | None, keep: KeepFn | None,
                 score_bias: ScoreBiasFn | None = None, score_in: float | None = None,
                 row_interval: RowIntervalFn | None = None, row_residual: KeepFn | None = None):
        self.e, self.coords = e, coords
        self.row_interval = row_interval
        self.row_residual = row_residual
        self.b, self.h = b, h
        self.scale = scale
        self.score_in = scale if score_in is None else score_in
        self.score_mod, self.keep = score_mod, keep
        self.score_bias = score_bias
        # Note [Row bit masks] (row_bits.py): a large mask of comparisons linear in j.
        self.row_bits = RowBits.of(keep) if row_interval is None else None

    def modify(self, rows, n_block) -> tuple[list[list[ir.Value]], ir.Value | None]:
        """(the rows, an offset the softmax adds to each of their scores or None): with
        score_mod(score_in * s, b, h, i, j) on every element (score_in: the scale, or what
        the score_mod's own scaling of s folds into it), or (score_bias) the raw score
        s + bias / scale, which the softmax scales by scale * log2(e) as it does s, its
        bias as the offset where that is one value for the tile (Note [Offsets of far
        tiles] in softmax.py); the rows as they are without either."""
        e = self.e
        if self.score_bias and getattr(self.score_bias, "j_linear", None):
            return self._linear_bias(rows, n_block), None
        if not self.score_bias and not self.score_mod:
            return rows, None
        b, h = self.b, self.h
        if self.score_bias:
            inv_scale = e.cf(1.0 / self.scale)
            grid = self._grid(self.score_bias, rows, n_block, flat=True)

            def biased(bias):
                return [[e.fma(bias(r, c, b, h, *self.coords(r, c, n_block)), inv_scale, x) for c, x in enumerate(row)]
                        for r, row in enumerate(rows)]
            if self.score_bias.of_diagonal:
                return grid.offset_over(rows, biased, lambda bias: e.fmul(
                    bias(0, 0, b, h, *self.coords(0, 0, n_block)), inv_scale))
            return grid.over(rows, biased), None
        return self._grid(self.score_mod, rows, n_block, flat=True).over(rows, lambda score_mod: [
            [score_mod(r, c, e.fmul(x, self.score_in), b, h, *self.coords(r, c, n_block)) for c, x in enumerate(row)]
            for r, row in enumerate(rows)]), None

    def _grid(self, hook, rows, n_block, below_n: bool = False, flat: bool = False) -> HookGrid:
        """`hook`'s HookGrid over `rows` of block n_block (`below_n`: its keys are below N;
        `flat`: the caller applies it `over` the scores, which may branch at the flat
        diagonals)."""
        return HookGrid(hook, self.e, self.b, self.h, len(rows), len(rows[0]), self.coords.row,
                        lambda c: self.coords.key(c, n_block, below_n), j_below_n=below_n,
                        diagonal=self.coords.diagonal, flat=flat, lanes=self.coords.lane_diagonal)

    def _linear_bias(self, rows, n_block):
        """s + bias / scale with the bias a * float(l + cj * d) (Note [Bias linear in j] in
        score_forms.py): per row one I2F, per score an FADD of an immediate and an FFMA."""
        e = self.e
        out = []
        for r, row in enumerate(rows):
            i, j0 = self.coords(r, 0, n_block)
            a, l, cj = self.score_bias.row_terms(e, self.b, self.h, i, j0)
            a = e.fmul(a, 1.0 / self.scale)
            lf = arith.sitofp(e.f32, l)
            new_row = []
            for c, x in enumerate(row):
                d = cj * self.coords.column(c)
                t = lf if d == 0 else e.fadd(lf, e.cf(float(d)))
                new_row.append(e.fma(a, t, x))
            out.append(new_row)
        return out

    def mask(self, rows, n_block, drop_all=None, holds=None, test: str | None = None):
        """-inf where j >= N or keep(b, h, i, j) is false (everywhere when the i1
        `drop_all` holds: the bound becomes j < 0, no instruction per element); `holds`:
        the block's tile_holds answer, (interval, residual) i1s (Note [Conjuncts a tile
        holds] in blockmap.py); `test`: a row interval's test per score (the mask op's
        interval_test, Note [One compare per score])."""
        e = self.e
        bound = e.dim("N") if drop_all is None else e.select(drop_all, e.c32(0), e.dim("N"))
        if self.row_interval is not None and holds is not None:
            return self._split(rows, n_block, bound, drop_all, *holds, test)
        if self.row_interval is not None:
            residual = self._residual(rows, n_block, below_n=False)
            return [self._masked_row(row, r, n_block, bound, test, residual=residual) for r, row in enumerate(rows)]
        if self.row_bits is not None:
            return [self._bit_masked_row(row, r, n_block, bound) for r, row in enumerate(rows)]
        keep = self._grid(self.keep, rows, n_block) if self.keep else None
        return [[self._masked(x, r, c, n_block, bound, keep) for c, x in enumerate(row)]
                for r, row in enumerate(rows)]

    def _residual(self, rows, n_block, below_n: bool) -> HookGrid | None:
        """The residual's HookGrid for `_masked_row`, or None without a residual."""
        if self.row_residual is None:
            return None
        return self._grid(self.row_residual, rows, n_block, below_n)

    def _split(self, rows, n_block, bound, drop_all, interval_holds, residual_holds, test: str | None):
        """Note [Conjuncts a tile holds] (blockmap.py): a block whose residual holds
        everywhere tests only its rows' intervals; one whose interval conjuncts hold, lies
        below N and is not dropped whole tests only the residual; any other, both."""
        e = self.e
        below_n = e.le(self.coords.block_end(n_block), e.dim("N"))
        if drop_all is not None:
            below_n = e.land(below_n, e.xor(drop_all, e.true()))

        def tested(interval: bool, residual: bool):
            def arm():
                grid = self._residual(rows, n_block, below_n=not interval) if residual else None
                return [self._masked_row(row, r, n_block, bound, test, interval, grid)
                        for r, row in enumerate(rows)]
            return arm

        return _branch(rows, residual_holds, tested(True, False),
                       lambda: _branch(rows, e.land(interval_holds, below_n), tested(False, True),
                                       tested(True, True)))

    def _masked_row(self, row, r, n_block, bound, test: str | None, interval: bool = True, residual=None):
        """Note [Row intervals] (row_intervals.py): the row keeps the keys [lo, min(hi,
        bound - 1)]; column c of the lane is j0 plus the constant `ElementCoords.column(c)`.

        Note [One compare per score]: LLVM turns select(a and b, x, y) into two nested
        selects, so testing lo <= d and d <= hi per score ("pair") costs two ISETP and
        two FSEL in SASS. "range" keeps the score at column d when d - lo < width as
        unsigned numbers, with width = max(hi - lo + 1, 0) per row (a d below lo wraps to
        a huge value): one add, one compare, one select. RowInterval.bounds clamps lo
        and hi to [-2^30, 2^30] (row_intervals._FAR) and N < 2^30, so nothing overflows.
        "bits" (the default up to 128-key tiles, 32 scores per row and lane) builds the row's
        kept columns as a 32-bit mask once (Note [Kept bits]) and tests bit c of it per
        score, which ptxas turns into one R2P per 7 scores and an FSEL each: the partial
        tile of window1024 at head dim 64 drops from 1751 (pair) and 1627 (range) SASS
        instructions per thread to 1492, at head dim 128 from 1288 (pair) to 1176,
        without more spills. Without a lower bound (lo None) "pair" and "range" are the
        one compare d <= hi. A residual (Note [Residual conjuncts], row_intervals.py) is
        ANDed with the test of each score. `interval` False: that part is known to hold (`_split`;
        the caller then guarantees the keys are below `bound`); `residual`: `_residual`'s
        grid of the residual, None where it holds or there is none."""
        e = self.e

        def masked(c, x, inside):
            if residual is not None:
                # Residual only: the block lies below N (Note [Indices known in range]).
                below_n = not interval
                kept = residual(r, c, self.b, self.h, *self.coords(r, c, n_block, nsw=below_n),
                                j_below_n=below_n)
                inside = kept if inside is None else e.land(inside, kept)
            return x if inside is None else e.select(inside, x, e.neg_inf())

        if not interval:
            return [masked(c, x, None) for c, x in enumerate(row)]
        if test is None:
            raise AttncError("a row interval's scores are tested as the mask op's interval_test says, and no "
                             "mask op gave one")
        i, j0 = self.coords(r, 0, n_block)
        lo, hi = self.row_interval(e, self.b, self.h, i)
        lo = e.sub(lo, j0) if lo is not None else None
        hi = e.sub(e.min(hi, e.sub(bound, 1)), j0)

        if test == "bits":
            assert len(row) <= 32, "interval_test 'bits' holds 32 scores per row and lane"
            bits = self._kept_bits(lo, hi, len(row))
            return [masked(c, x, e.ne(e.and_(bits, 1 << c), 0)) for c, x in enumerate(row)]
        columns = [self.coords.column(c) for c in range(len(row))]
        if lo is None:
            return [masked(c, x, e.ge(hi, d)) for c, (x, d) in enumerate(zip(row, columns))]
        if test == "pair":
            return [masked(c, x, e.land(e.le(lo, d), e.ge(hi, d))) for c, (x, d) in enumerate(zip(row, columns))]
        width = e.max(e.add(e.sub(hi, lo), 1), 0)
        return [masked(c, x, e.ult(e.sub(d, lo), width)) for c, (x, d) in enumerate(zip(row, columns))]

    def _kept_bits(self, lo, hi, slots: int):
        """Note [Kept bits]: bit c set when the lane's column(c) lies in [lo, hi] (both
        relative to its first column). column(c) = 8 (c // 2) + c % 2 grows with c, so
        the kept slots are the run [below(lo), below(hi + 1)), with below(v) (row_bits.py)
        the slots whose column is < v."""
        e = self.e
        kept = low_bits(e, below(e, e.add(hi, 1), slots), slots)
        return kept if lo is None else e.and_(kept, e.xor(low_bits(e, below(e, lo, slots), slots), -1))

    def _bit_masked_row(self, row, r, n_block, bound):
        """Note [Row bit masks] (row_bits.py): row r's kept keys below `bound` as one bit
        mask per 32 scores, built once; each score tests its bit."""
        e = self.e
        i, j0 = self.coords(r, 0, n_block)
        words = self.row_bits.words(e, self.b, self.h, i, j0, bound, len(row))
        return [e.select(e.ne(e.and_(words[c // WORD], 1 << (c % WORD)), 0), x, e.neg_inf())
                for c, x in enumerate(row)]

    def _masked(self, x, r, c, n_block, bound, keep: HookGrid | None):
        """x, or -inf where j >= bound or `keep` says no, at row r, column c."""
        e = self.e
        i, j = self.coords(r, c, n_block)
        kept = e.lt(j, bound)
        if keep is not None:
            kept = e.land(kept, keep(r, c, self.b, self.h, i, j))
        return e.select(kept, x, e.neg_inf())

    def mask_if(self, rows, n_block, partial, drop_all=None, holds=None, test: str | None = None):
        """`mask` when the runtime i1 `partial` holds, the rows unchanged otherwise."""
        return _branch(rows, partial, lambda: self.mask(rows, n_block, drop_all, holds, test), lambda: rows)


def _branch(rows, cond, then_rows, else_rows, mark: str | None = None):
    """scf.if on the i1 `cond` yielding score rows: `then_rows()` or `else_rows()`, each
    emitted in its own arm; `mark`: a unit attribute the scf.if carries."""
    return _branch_with(rows, cond, lambda: (then_rows(), []), lambda: (else_rows(), []), [], mark)[0]


def _branch_with(rows, cond, then_arm, else_arm, types: list, mark: str | None = None):
    """`_branch` whose arms give (score rows, more values of `types`): (rows, values)."""
    def flat(arm):
        def side():
            arm_rows, more = arm()
            return [x for row in arm_rows for x in row] + more
        return side
    width, n = len(rows[0]), len(rows) * len(rows[0])
    res = branches(cond, flat(then_arm), flat(else_arm), [x.type for row in rows for x in row] + types)
    if mark:
        res[0].owner.attributes[mark] = ir.UnitAttr.get()
    return [res[r * width:(r + 1) * width] for r in range(len(rows))], res[n:]

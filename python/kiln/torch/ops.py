"""kiln's fused ops as torch.library custom ops (namespace ``kiln::``).

Each op is declared once: its schema (the Python signature), the impl that
launches kiln's C launcher on the current CUDA stream through ctypes, a fake
(meta) impl for torch.compile / FakeTensor, and an autograd formula that
calls the op's ``*_backward`` custom op. The public functions at the bottom
(``kiln.torch.scaled_softmax`` ...) are shaped like torch.nn.functional.

Where torch has its stable C shim, the ops with a C kernel in libkiln_torch
(kiln.torch._fast) run it instead of the impl here, with the same checks and
messages, and take their autograd formula through a torch.autograd.Function
only when an input requires grad (_Op; docs/python.md, "The fast path").

Inputs: float32, float16 or bfloat16 (weights may be float32 with 16-bit
activations where the C API says so); token ids and targets int64. Inputs
of any layout (transposed, sliced, expanded) are made contiguous (a copy)
where the op only reads them; outputs are always new contiguous tensors, in
the real and the fake impls alike. Every tensor argument is checked against
the others (dtype, shape, device) before any launch: KilnInvalidArgument.
An empty batch gives empty outputs (and zero weight gradients) with no
launch. Launch failures raise the KilnError subclass of kiln's status with
kiln's message. Double backward: docs/python.md says, per op, whether it is
computed or refused (KilnUnsupported).
"""

from __future__ import annotations

import torch
from torch import Tensor

from kiln._lib import KILN_OPS_SYNC_CHECK, int_arg, lib
from kiln.api import check
from kiln.errors import KilnInvalidArgument, KilnUnsupported
from kiln.torch import _fast
from kiln.torch import _runtime as rt

_I64_MAX = 2**63 - 1

_ALIGN = 256  # workspaces: what cuMemAlloc returns


_LIB = torch.library.Library("kiln", "DEF")
_OPS: list[_Op] = []
# What _register() made: the Python impls' and autograd formulas' library,
# and the C kernels' registrations (libkiln_torch), removed and made again
# whenever the path or the CPU-tensor test mode changes.
_impls: dict[str, object] = {}
_grad_enabled = torch.is_grad_enabled
# False in eager, folded to True by Dynamo as it traces (torch >= 2.3; None
# before: the ops are then always called through their OpOverload)
_dynamo_compiling = getattr(getattr(torch, "compiler", None), "is_dynamo_compiling", None)


class _Op:
    """One kiln:: op: defined with the schema torch infers from fn's type
    hints, with a fake impl and an autograd formula, callable as the op.

    Its kernel for CUDA (and CPU, which only the fake driver's test mode gets
    past) is fn, the Python impl, with the formula registered as its autograd
    kernel (torch.library.register_autograd): today's path, and the fallback.
    On the fast path (kiln.torch._fast) an op with a C kernel in
    libkiln_torch has that kernel instead, no autograd kernel in the
    dispatcher, and the formula in a torch.autograd.Function that calling
    the op uses only when an input requires grad: a call without grad
    reaches the C kernel with no Python in between (bench/torch_overhead.py
    measures both). Called from Python in eager (kiln.torch's functions,
    the formulas), an op on either path runs its kernel directly and its
    formula through that Function (_make_call); torch.ops.kiln.<op>, and
    torch.compile, go through the dispatcher."""

    def __init__(self, fn):  # type: ignore[no-untyped-def]
        name = fn.__name__.lstrip("_")
        try:
            schema = torch.library.infer_schema(fn, mutates_args=())
        except AttributeError:  # torch < 2.5, whose infer_schema reads no string annotations
            import typing

            from torch._library.infer_schema import infer_schema

            fn.__annotations__ = typing.get_type_hints(fn)
            schema = infer_schema(fn, mutates_args=())
        _LIB.define(name + schema)
        self.name = name
        self.qualname = f"kiln::{name}"
        self._init_fn = fn
        self._op = getattr(getattr(torch.ops.kiln, name), "default")
        self._autograd = None  # (backward, setup_context)
        self._functions: dict[str, type] = {}  # the autograd.Function of each path ("c", "py")
        self._fn = None  # its Function while this op is on the fast path (traced() uses it)
        self._c = False  # this op runs its C kernel (the fast path)
        self.call = self.traced  # the eager call, made for the path by _register()
        self._tensors = tuple(
            i for i, a in enumerate(self._op._schema.arguments) if a.type.isSubtypeOf(torch._C.OptionalType.ofTensor())
        )
        _OPS.append(self)

    def __call__(self, *args):  # type: ignore[no-untyped-def]
        return self.call(*args)

    def traced(self, *args):  # type: ignore[no-untyped-def]
        """The call through the OpOverload: what torch.compile (Dynamo) must
        see, and the call before _register()."""
        fn = self._fn  # set only on the fast path, for an op with a formula
        if fn is not None and _grad_enabled():
            for i in self._tensors:
                a = args[i]
                if a is not None and a.requires_grad:
                    try:
                        return fn.apply(*args)
                    except RuntimeError as e:
                        raise _fast.kiln_error(e) from None
        if not self._c:  # the Python impl raises kiln's errors itself
            return self._op(*args)
        try:
            return self._op(*args)
        except RuntimeError as e:
            raise _fast.kiln_error(e) from None

    def _direct(self):  # type: ignore[no-untyped-def]
        """The OpOverload's C++ callable, or None where calling it directly
        would not be the OpOverload's call (see _make_call)."""
        if _dynamo_compiling is None or getattr(self._op, "_pyobj_dispatcher", None) is not None:
            return None
        return getattr(self._op, "_op", None)

    def _kernel(self):  # type: ignore[no-untyped-def]
        """What an eager call runs for the path in use, with no autograd
        around it, or None (every call then goes through the OpOverload):
        the C kernel through the op's C++ callable; or the Python impl
        itself, in place of a dispatcher round trip into Python, unless a
        dispatch or function mode is active or a tensor is a subclass
        (DTensor, FakeTensor), which the dispatcher must see."""
        direct = self._direct()
        if direct is None or self._c:
            return direct
        impl, tensors, plain = self._init_fn, self._tensors, torch.Tensor
        dispatch_modes, function_mode = torch._C._len_torch_dispatch_stack, torch._C._is_torch_function_mode_enabled

        def in_place(*args):  # type: ignore[no-untyped-def]
            if dispatch_modes() or function_mode():
                return direct(*args)
            for i in tensors:
                a = args[i]
                if a is not None and type(a) is not plain:
                    return direct(*args)
            return impl(*args)

        return in_place

    def _make_call(self):  # type: ignore[no-untyped-def]
        """The eager call: traced()'s behaviour with less Python per call
        (bench/torch_overhead.py). The kernel (_kernel) is called directly,
        through the op's autograd.Function when an input requires grad (on
        both paths: the fallback's register_autograd kernel serves raw
        torch.ops calls and torch.compile), and the op's tensor slots are
        looked up once. Dynamo cannot trace the OpOverload's C++ callable,
        so under torch.compile (is_dynamo_compiling(), which Dynamo folds
        to True) the call is traced()."""
        kernel = self._kernel()
        if kernel is None:
            return self.traced
        dynamo, traced, grad, tensors = _dynamo_compiling, self.traced, _grad_enabled, self._tensors
        fn = self.function()
        apply = fn.apply if fn is not None else None
        mapped, kiln_error = self._c, _fast.kiln_error  # a C kernel's RuntimeError -> its KilnError

        def call(*args):  # type: ignore[no-untyped-def]
            if dynamo():
                return traced(*args)
            try:
                if apply is not None and grad():
                    for i in tensors:
                        a = args[i]
                        if a is not None and a.requires_grad:
                            return apply(*args)
                return kernel(*args)
            except RuntimeError as e:
                if mapped:
                    raise kiln_error(e) from None
                raise

        return call

    def register_fake(self, fn):  # type: ignore[no-untyped-def]
        torch.library.register_fake(self.qualname, fn, lib=_LIB)
        return fn

    def register_autograd(self, backward, setup_context):  # type: ignore[no-untyped-def]
        self._autograd = (backward, setup_context)

    def function(self):  # type: ignore[no-untyped-def]
        """The op with its autograd formula as a torch.autograd.Function (the
        same forward / setup_context / backward that register_autograd makes
        a kernel of), or None for an op without one. Its forward calls the
        path's kernel (_kernel) in eager and the OpOverload while Dynamo
        traces; one Function per path, made once (a path's kernel does not
        change: it depends on the path and on torch alone)."""
        if self._autograd is None:
            return None
        key = "c" if self._c else "py"
        if key not in self._functions:
            backward, setup = self._autograd
            op, kernel = self._op, self._kernel()

            # forward(ctx, ...) running setup itself, not a setup_context
            # staticmethod: with one, Function.apply binds the arguments
            # through inspect.signature on every call (tens of microseconds)
            def forward(ctx, *args):  # type: ignore[no-untyped-def]
                out = op(*args) if kernel is None or _dynamo_compiling() else kernel(*args)  # type: ignore[misc]
                setup(ctx, args, out)
                return out

            self._functions[key] = type(
                "kiln_" + self.name,
                (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)},
            )
        return self._functions[key]


def _register() -> None:
    """(Re)registers every op's kernels for the path in use: C kernels for the
    ops libkiln_torch has (CUDA always, CPU only in the CPU-tensor test mode),
    the Python impl and its autograd formula for the rest."""
    old = _impls.pop("py", None)
    if old is not None:
        old._destroy()  # type: ignore[attr-defined]
    for key in ("c_cuda", "c_cpu"):
        _fast.unregister(_impls.pop(key, None))  # type: ignore[arg-type]
    fast = _fast.ops()
    cpu_c = rt.cpu_tensors_enabled()
    py = torch.library.Library("kiln", "IMPL")
    c_cuda: list[str] = []
    c_cpu: list[str] = []
    for op in _OPS:
        c = op.name in fast
        (c_cuda.append(op.name) if c else py.impl(op.name, op._init_fn, "CUDA"))
        (c_cpu.append(op.name) if c and cpu_c else py.impl(op.name, op._init_fn, "CPU"))
        if op._autograd is not None and not c:
            torch.library.register_autograd(op.qualname, op._autograd[0], setup_context=op._autograd[1], lib=py)
        elif c:
            # no autograd kernel at all: the dispatcher goes straight to the C
            # kernel (torch's not-implemented fallback would build a graph node
            # per call with an input that requires grad, inside the Function's
            # forward too); gradients come from the Function
            py.impl(op.name, torch.library.fallthrough_kernel, "Autograd")
        op._c = c
        op._fn = op.function() if c else None
        op.call = op._make_call()
    _impls["py"] = py
    _impls["c_cuda"] = _fast.register("CUDA", c_cuda)
    _impls["c_cpu"] = _fast.register("CPU", c_cpu)


def _bad(msg: str) -> KilnInvalidArgument:
    return KilnInvalidArgument(msg, status="KILN_EINVAL", code=-1)


def _c(t: Tensor) -> Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _c_opt(t: Tensor | None) -> Tensor | None:
    return _c(t) if t is not None else None


def _new(shape, dtype: torch.dtype, like: Tensor) -> Tensor:  # type: ignore[no-untyped-def]
    """A new contiguous tensor on like's device: what every op returns, in
    its real and its fake impl (empty_like would keep like's strides)."""
    return torch.empty(shape, dtype=dtype, device=like.device)


def _match(op: str, ref_name: str, ref: Tensor, **others: Tensor) -> None:
    """Each of others has ref's dtype, shape and device (a gradient and the
    tensor it is the gradient of)."""
    for name, t in others.items():
        if t.dtype != ref.dtype or t.shape != ref.shape or t.device != ref.device:
            raise _bad(
                f"kiln.torch.{op}: {name} is {t.dtype} {tuple(t.shape)} on {t.device}, {ref_name} "
                f"{ref.dtype} {tuple(ref.shape)} on {ref.device}; they must match"
            )


def _f32(op: str, name: str, t: Tensor, shape: tuple[int, ...], like: Tensor) -> None:
    """t is float32 of shape on like's device (saved statistics, per-row losses)."""
    if t.dtype != torch.float32 or tuple(t.shape) != tuple(shape) or t.device != like.device:
        raise _bad(
            f"kiln.torch.{op}: {name} is {t.dtype} {tuple(t.shape)} on {t.device}; want float32 "
            f"{tuple(shape)} on {like.device}"
        )


def _no_double_backward(op: str):  # type: ignore[no-untyped-def]
    """The autograd formula of a *_backward op whose own derivative kiln does
    not give: a gradient of the gradient raises instead of being zeros."""

    def backward(ctx, *grads):  # type: ignore[no-untyped-def]
        raise KilnUnsupported(
            f"kiln.torch.{op}: double backward (the gradient of its gradient, create_graph=True) "
            "is not supported; use torch's own op where higher-order gradients are needed "
            "(docs/python.md)",
            status="KILN_EUNSUPPORTED",
            code=-12,
        )

    return backward


def _no_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    pass


def _same_dtype(op: str, x: Tensor, **others: Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.dtype != x.dtype:
            raise _bad(f"kiln.torch.{op}: {name} is {t.dtype}, x is {x.dtype}; they must match")
        if t is not None and t.device != x.device:
            raise _bad(f"kiln.torch.{op}: {name} is on {t.device}, x on {x.device}")


def _rows_cols(op: str, x: Tensor) -> tuple[int, int]:
    if x.dim() < 1 or x.shape[-1] == 0:
        raise _bad(f"kiln.torch.{op}: x of shape {tuple(x.shape)} has no last dimension to use")
    cols = x.shape[-1]
    return x.numel() // cols, cols


def _run(unit: str, x: Tensor, fn: str, *args: object) -> int:
    """Launches lib.<fn>(loader, *args, stream) for x's device; returns the
    loader handle for follow-up checks."""
    dev = rt.ordinal(x.device)
    h = rt.resolve(dev, unit)
    check(getattr(lib, fn)(h, *args, rt.stream(x)))
    return dev


def _workspace(nbytes: int, like: Tensor) -> tuple[Tensor | None, int | None]:
    """nbytes of scratch from torch's allocator, 256-byte aligned."""
    if nbytes == 0:
        return None, None
    buf = torch.empty(nbytes + _ALIGN, dtype=torch.uint8, device=like.device)
    p = buf.data_ptr()
    return buf, p + (-p % _ALIGN)


def _check_data(x: Tensor, dev: int) -> None:
    """kiln_ops_check on x's stream (sync_check=True ops)."""
    check(lib.kiln_ops_check(rt.loader(dev), rt.stream(x)))


def check_data(device: torch.device | str | int | None = None) -> None:
    """Raises KilnInvalidArgument with the first data error (a token id or
    target outside the vocabulary) since the last check on this device's
    current stream, e.g. "kiln_embedding_fwd: token id 32001 at position 17
    is outside the vocabulary [0, 32000)"; synchronizes that stream. The CUDA
    context keeps working either way."""
    if device is None:
        dev = torch.cuda.current_device() if torch.cuda.is_available() else 0
        t = torch.empty(0, device=f"cuda:{dev}" if torch.cuda.is_available() else "cpu")
    else:
        d = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
        dev = rt.ordinal(d)
        t = torch.empty(0, device=d)
    _check_data(t, dev)


# ---- softmax ------------------------------------------------------------------------


@_Op
def _scaled_softmax(x: Tensor, scale: float) -> Tensor:
    rows, cols = _rows_cols("scaled_softmax", x)
    dt = rt.dtype_code(x, "x")
    x = _c(x)
    y = _new(x.shape, x.dtype, x)
    if rows == 0:
        return y
    _run("scaled_softmax", x, "kiln_scaled_softmax_fwd", dt, y.data_ptr(), x.data_ptr(), rows, cols, scale)
    return y


@_Op
def _scaled_softmax_backward(dy: Tensor, y: Tensor, scale: float) -> Tensor:
    rows, cols = _rows_cols("scaled_softmax_backward", y)
    _match("scaled_softmax_backward", "y", y, dy=dy)
    dt = rt.dtype_code(y, "y")
    dy, y = _c(dy), _c(y)
    dx = _new(y.shape, y.dtype, y)
    if rows == 0:
        return dx
    _run("scaled_softmax", y, "kiln_scaled_softmax_bwd", dt, dx.data_ptr(), y.data_ptr(), dy.data_ptr(), rows, cols, scale)
    return dx


def _mask_u8(mask: Tensor) -> Tensor:
    if mask.dtype == torch.bool:
        return _c(mask).view(torch.uint8)
    if mask.dtype != torch.uint8:
        raise _bad(f"kiln.torch.scaled_masked_softmax: mask is {mask.dtype}; want bool or uint8")
    return _c(mask)


@_Op
def _scaled_masked_softmax(x: Tensor, mask: Tensor, scale: float) -> Tensor:
    if x.dim() != 4 or mask.dim() != 4:
        raise _bad(
            "kiln.torch.scaled_masked_softmax: want x [b, heads, sq, sk] and mask "
            f"[b or 1, 1, sq, sk]; got {tuple(x.shape)} and {tuple(mask.shape)}"
        )
    b, heads, sq, sk = x.shape
    if mask.shape[1] != 1 or mask.shape[2:] != x.shape[2:] or mask.shape[0] not in (1, b):
        raise _bad(
            f"kiln.torch.scaled_masked_softmax: mask {tuple(mask.shape)} does not fit x "
            f"{tuple(x.shape)} (want [{b} or 1, 1, {sq}, {sk}])"
        )
    if mask.device != x.device:
        raise _bad(f"kiln.torch.scaled_masked_softmax: mask is on {mask.device}, x on {x.device}")
    if sk == 0:
        raise _bad(f"kiln.torch.scaled_masked_softmax: x {tuple(x.shape)} has sk = 0 keys")
    dt = rt.dtype_code(x, "x")
    x, m = _c(x), _mask_u8(mask)
    y = _new(x.shape, x.dtype, x)
    if y.numel() == 0:
        return y
    _run(
        "scaled_masked_softmax", x, "kiln_scaled_masked_softmax_fwd",
        dt, y.data_ptr(), x.data_ptr(), m.data_ptr(), b, heads, sq, sk, m.shape[0], scale,
    )
    return y


@_Op
def _scaled_masked_softmax_backward(dy: Tensor, y: Tensor, scale: float) -> Tensor:
    if y.dim() != 4 or y.shape[-1] == 0:
        raise _bad(f"kiln.torch.scaled_masked_softmax_backward: want y [b, heads, sq, sk >= 1]; got {tuple(y.shape)}")
    _match("scaled_masked_softmax_backward", "y", y, dy=dy)
    b, heads, sq, sk = y.shape
    dt = rt.dtype_code(y, "y")
    dy, y = _c(dy), _c(y)
    dx = _new(y.shape, y.dtype, y)
    if dx.numel() == 0:
        return dx
    _run(
        "scaled_masked_softmax", y, "kiln_scaled_masked_softmax_bwd",
        dt, dx.data_ptr(), y.data_ptr(), dy.data_ptr(), b, heads, sq, sk, scale,
    )
    return dx


@_Op
def _scaled_upper_triang_masked_softmax(x: Tensor, scale: float) -> Tensor:
    if x.dim() != 3:
        raise _bad(
            "kiln.torch.scaled_upper_triang_masked_softmax: want x [attn_batches, sq, sk]; "
            f"got {tuple(x.shape)}"
        )
    ab, sq, sk = x.shape
    if sk == 0:
        raise _bad(f"kiln.torch.scaled_upper_triang_masked_softmax: x {tuple(x.shape)} has sk = 0 keys")
    dt = rt.dtype_code(x, "x")
    x = _c(x)
    y = _new(x.shape, x.dtype, x)
    if y.numel() == 0:
        return y
    _run(
        "scaled_upper_triang_masked_softmax", x, "kiln_scaled_upper_triang_masked_softmax_fwd",
        dt, y.data_ptr(), x.data_ptr(), ab, sq, sk, scale,
    )
    return y


@_Op
def _scaled_upper_triang_masked_softmax_backward(dy: Tensor, y: Tensor, scale: float) -> Tensor:
    if y.dim() != 3 or y.shape[-1] == 0:
        raise _bad(
            "kiln.torch.scaled_upper_triang_masked_softmax_backward: want y [attn_batches, sq, sk >= 1]; "
            f"got {tuple(y.shape)}"
        )
    _match("scaled_upper_triang_masked_softmax_backward", "y", y, dy=dy)
    ab, sq, sk = y.shape
    dt = rt.dtype_code(y, "y")
    dy, y = _c(dy), _c(y)
    dx = _new(y.shape, y.dtype, y)
    if dx.numel() == 0:
        return dx
    _run(
        "scaled_upper_triang_masked_softmax", y, "kiln_scaled_upper_triang_masked_softmax_bwd",
        dt, dx.data_ptr(), y.data_ptr(), dy.data_ptr(), ab, sq, sk, scale,
    )
    return dx


for _op in (_scaled_softmax, _scaled_masked_softmax, _scaled_upper_triang_masked_softmax):
    _op.register_fake(lambda x, *a: _new(x.shape, x.dtype, x))
for _op in (_scaled_softmax_backward, _scaled_masked_softmax_backward, _scaled_upper_triang_masked_softmax_backward):
    _op.register_fake(lambda dy, y, scale: _new(y.shape, y.dtype, y))


def _softmax_bwd_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    dy, y, scale = inputs
    ctx.save_for_backward(dy, y)
    ctx.scale = scale


def _softmax_bwd_grad(ctx, g):  # type: ignore[no-untyped-def]
    """The softmax backward's own derivative (double backward), in torch ops:
    dx = scale * y * (dy - sum(y * dy)), so for a gradient g of dx,
    d dy = scale * y * (g - sum(g * y)) and
    d y = scale * (g * (dy - sum(y * dy)) - dy * sum(g * y)); float32 math.
    A masked position has y = 0, which the forward's own backward keeps."""
    dy, y = ctx.saved_tensors
    gf, dyf, yf = g.float(), dy.float(), y.float()
    gy = (gf * yf).sum(-1, keepdim=True)
    s = (dyf * yf).sum(-1, keepdim=True)
    d_dy = ctx.scale * yf * (gf - gy)
    d_y = ctx.scale * (gf * (dyf - s) - dyf * gy)
    return d_dy.to(dy.dtype), d_y.to(y.dtype), None


for _op in (_scaled_softmax_backward, _scaled_masked_softmax_backward, _scaled_upper_triang_masked_softmax_backward):
    _op.register_autograd(_softmax_bwd_grad, setup_context=_softmax_bwd_setup)


def _softmax_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.save_for_backward(output)
    ctx.scale = inputs[-1]


# One formula per op, each naming its backward op as a global: torch.compile
# traces the fast path's autograd.Function through them, and an op object
# captured in a closure is one it cannot wrap.
def _scaled_softmax_grad(ctx, dy):  # type: ignore[no-untyped-def]
    (y,) = ctx.saved_tensors
    return _scaled_softmax_backward(dy, y, ctx.scale), None


def _scaled_masked_softmax_grad(ctx, dy):  # type: ignore[no-untyped-def]
    (y,) = ctx.saved_tensors
    return _scaled_masked_softmax_backward(dy, y, ctx.scale), None, None


def _scaled_upper_triang_masked_softmax_grad(ctx, dy):  # type: ignore[no-untyped-def]
    (y,) = ctx.saved_tensors
    return _scaled_upper_triang_masked_softmax_backward(dy, y, ctx.scale), None


_scaled_softmax.register_autograd(_scaled_softmax_grad, setup_context=_softmax_setup)
_scaled_masked_softmax.register_autograd(_scaled_masked_softmax_grad, setup_context=_softmax_setup)
_scaled_upper_triang_masked_softmax.register_autograd(
    _scaled_upper_triang_masked_softmax_grad, setup_context=_softmax_setup
)


# ---- layer norm and RMSNorm ---------------------------------------------------------------


def _norm_args(op: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[int, int, int, int]:
    rows, cols = _rows_cols(op, x)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise _bad(f"kiln.torch.{op}: {name} is on {t.device}, x on {x.device}")
    if weight.shape != (cols,) or (bias is not None and bias.shape != (cols,)):
        raise _bad(
            f"kiln.torch.{op}: weight/bias must be [{cols}] (x's last dimension); got "
            f"{tuple(weight.shape)}" + (f" and {tuple(bias.shape)}" if bias is not None else "")
        )
    if weight.dtype not in (torch.float32, x.dtype) or (bias is not None and bias.dtype != weight.dtype):
        raise _bad(f"kiln.torch.{op}: weight and bias are float32 or x's dtype ({x.dtype}), both the same")
    return rows, cols, rt.dtype_code(x, "x"), rt.dtype_code(weight, "weight")


@_Op
def _layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    rows, cols, dt, wdt = _norm_args("layer_norm", x, weight, bias)
    x, weight, bias = _c(x), _c(weight), _c(bias)
    y = _new(x.shape, x.dtype, x)
    mean = _new(x.shape[:-1], torch.float32, x)
    rstd = _new(x.shape[:-1], torch.float32, x)
    if rows == 0:
        return y, mean, rstd
    _run(
        "layer_norm", x, "kiln_layer_norm_fwd", dt, wdt, y.data_ptr(), mean.data_ptr(),
        rstd.data_ptr(), x.data_ptr(), weight.data_ptr(), bias.data_ptr(), rows, cols, eps,
    )
    return y, mean, rstd


@_layer_norm.register_fake
def _(x, weight, bias, eps):  # type: ignore[no-untyped-def]
    return _new(x.shape, x.dtype, x), _new(x.shape[:-1], torch.float32, x), _new(x.shape[:-1], torch.float32, x)


@_Op
def _layer_norm_backward(
    dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    rows, cols, dt, wdt = _norm_args("layer_norm_backward", x, weight, None)
    _match("layer_norm_backward", "x", x, dy=dy)
    _f32("layer_norm_backward", "mean", mean, x.shape[:-1], x)
    _f32("layer_norm_backward", "rstd", rstd, x.shape[:-1], x)
    dy, x, mean, rstd, weight = _c(dy), _c(x), _c(mean), _c(rstd), _c(weight)
    dx = _new(x.shape, x.dtype, x)
    if rows == 0:  # the sum over no rows
        return dx, torch.zeros_like(weight), torch.zeros_like(weight)
    dgamma = _new(weight.shape, weight.dtype, weight)
    dbeta = _new(weight.shape, weight.dtype, weight)
    nbytes = lib.kiln_layer_norm_bwd_workspace_size(rows, cols)
    ws, wp = _workspace(nbytes, x)
    _run(
        "layer_norm", x, "kiln_layer_norm_bwd", dt, wdt, dx.data_ptr(), dgamma.data_ptr(),
        dbeta.data_ptr(), dy.data_ptr(), x.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
        weight.data_ptr(), rows, cols, wp, nbytes,
    )
    del ws
    return dx, dgamma, dbeta


@_layer_norm_backward.register_fake
def _(dy, x, mean, rstd, weight):  # type: ignore[no-untyped-def]
    return _new(x.shape, x.dtype, x), _new(weight.shape, weight.dtype, x), _new(weight.shape, weight.dtype, x)


def _layer_norm_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    x, weight, _, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)


def _layer_norm_grad(ctx, dy, _dmean, _drstd):  # type: ignore[no-untyped-def]
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dgamma, dbeta = _layer_norm_backward(dy, x, mean, rstd, weight)
    return dx, dgamma, dbeta, None


_layer_norm.register_autograd(_layer_norm_grad, setup_context=_layer_norm_setup)
_layer_norm_backward.register_autograd(_no_double_backward("layer_norm"), setup_context=_no_setup)


@_Op
def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    rows, cols, dt, wdt = _norm_args("rms_norm", x, weight, None)
    x, weight = _c(x), _c(weight)
    y = _new(x.shape, x.dtype, x)
    rstd = _new(x.shape[:-1], torch.float32, x)
    if rows == 0:
        return y, rstd
    _run(
        "rms_norm", x, "kiln_rms_norm_fwd", dt, wdt, y.data_ptr(), rstd.data_ptr(), x.data_ptr(),
        weight.data_ptr(), rows, cols, eps,
    )
    return y, rstd


@_rms_norm.register_fake
def _(x, weight, eps):  # type: ignore[no-untyped-def]
    return _new(x.shape, x.dtype, x), _new(x.shape[:-1], torch.float32, x)


@_Op
def _rms_norm_backward(dy: Tensor, x: Tensor, rstd: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
    rows, cols, dt, wdt = _norm_args("rms_norm_backward", x, weight, None)
    _match("rms_norm_backward", "x", x, dy=dy)
    _f32("rms_norm_backward", "rstd", rstd, x.shape[:-1], x)
    dy, x, rstd, weight = _c(dy), _c(x), _c(rstd), _c(weight)
    dx = _new(x.shape, x.dtype, x)
    if rows == 0:  # the sum over no rows
        return dx, torch.zeros_like(weight)
    dgamma = _new(weight.shape, weight.dtype, weight)
    nbytes = lib.kiln_rms_norm_bwd_workspace_size(rows, cols)
    ws, wp = _workspace(nbytes, x)
    _run(
        "rms_norm", x, "kiln_rms_norm_bwd", dt, wdt, dx.data_ptr(), dgamma.data_ptr(),
        dy.data_ptr(), x.data_ptr(), rstd.data_ptr(), weight.data_ptr(), rows, cols, wp, nbytes,
    )
    del ws
    return dx, dgamma


@_rms_norm_backward.register_fake
def _(dy, x, rstd, weight):  # type: ignore[no-untyped-def]
    return _new(x.shape, x.dtype, x), _new(weight.shape, weight.dtype, x)


def _rms_norm_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.save_for_backward(inputs[0], inputs[1], output[1])


def _rms_norm_grad(ctx, dy, _drstd):  # type: ignore[no-untyped-def]
    x, weight, rstd = ctx.saved_tensors
    dx, dgamma = _rms_norm_backward(dy, x, rstd, weight)
    return dx, dgamma, None


_rms_norm.register_autograd(_rms_norm_grad, setup_context=_rms_norm_setup)
_rms_norm_backward.register_autograd(_no_double_backward("rms_norm"), setup_context=_no_setup)


# ---- embedding ---------------------------------------------------------------------------


def _ids(op: str, ids: Tensor, like: Tensor) -> Tensor:
    if ids.dtype != torch.int64:
        raise _bad(f"kiln.torch.{op}: token ids/targets are {ids.dtype}; want int64")
    if ids.device != like.device:
        raise _bad(f"kiln.torch.{op}: ids are on {ids.device}, the weights/logits on {like.device}")
    return _c(ids)


@_Op
def _embedding(ids: Tensor, weight: Tensor, vocab_start: int, vocab_size: int, sync_check: bool) -> Tensor:
    if weight.dim() != 2:
        raise _bad(f"kiln.torch.embedding: weight must be [vocab_part, hidden]; got {tuple(weight.shape)}")
    if weight.shape[0] == 0 or weight.shape[1] == 0:
        raise _bad(f"kiln.torch.embedding: weight {tuple(weight.shape)} has no rows or no columns")
    ids, weight = _ids("embedding", ids, weight), _c(weight)
    part, hidden = weight.shape
    dt = rt.dtype_code(weight, "weight")
    y = _new((*ids.shape, hidden), weight.dtype, weight)
    if ids.numel() == 0:
        return y
    flags = KILN_OPS_SYNC_CHECK if sync_check else 0
    _run(
        "embedding", weight, "kiln_embedding_fwd", dt, y.data_ptr(), ids.data_ptr(),
        weight.data_ptr(), ids.numel(), hidden, vocab_start, vocab_start + part, vocab_size, flags,
    )
    return y


@_embedding.register_fake
def _(ids, weight, vocab_start, vocab_size, sync_check):  # type: ignore[no-untyped-def]
    return _new((*ids.shape, weight.shape[1]), weight.dtype, weight)


@_Op
def _embedding_backward(
    dy: Tensor, ids: Tensor, vocab_part: int, vocab_start: int, deterministic: bool
) -> Tensor:
    ids = _ids("embedding_backward", ids, dy)
    if dy.dim() != ids.dim() + 1 or dy.shape[:-1] != ids.shape or dy.shape[-1] == 0:
        raise _bad(
            f"kiln.torch.embedding_backward: dy {tuple(dy.shape)} does not fit ids {tuple(ids.shape)} "
            "(want [*ids.shape, hidden])"
        )
    if vocab_part < 1 or vocab_start < 0:
        raise _bad(f"kiln.torch.embedding_backward: vocab_part = {vocab_part}, vocab_start = {vocab_start}")
    dt = rt.dtype_code(dy, "dy")
    dy = _c(dy)
    hidden = dy.shape[-1]
    dweight = torch.zeros((vocab_part, hidden), dtype=torch.float32, device=dy.device)
    if ids.numel() == 0:
        return dweight
    vend = vocab_start + vocab_part
    nbytes = lib.kiln_embedding_bwd_workspace_size(ids.numel(), vocab_start, vend, int(deterministic))
    ws, wp = _workspace(nbytes, dy)
    _run(
        "embedding", dy, "kiln_embedding_bwd", dt, dweight.data_ptr(), dy.data_ptr(), ids.data_ptr(),
        ids.numel(), hidden, vocab_start, vend, int(deterministic), wp, nbytes,
    )
    del ws
    return dweight


@_embedding_backward.register_fake
def _(dy, ids, vocab_part, vocab_start, deterministic):  # type: ignore[no-untyped-def]
    return _new((vocab_part, dy.shape[-1]), torch.float32, dy)


def _embedding_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ids, weight, vocab_start, _, _ = inputs
    ctx.save_for_backward(ids)
    ctx.vocab_start, ctx.part, ctx.wdtype = vocab_start, weight.shape[0], weight.dtype


def _embedding_grad(ctx, dy):  # type: ignore[no-untyped-def]
    (ids,) = ctx.saved_tensors
    dweight = _embedding_backward(dy, ids, ctx.part, ctx.vocab_start, True)
    return None, dweight.to(ctx.wdtype), None, None, None


_embedding.register_autograd(_embedding_grad, setup_context=_embedding_setup)
_embedding_backward.register_autograd(_no_double_backward("embedding"), setup_context=_no_setup)


# ---- bias + GeLU, bias + SwiGLU ---------------------------------------------------------------


def _bias_check(op: str, x: Tensor, bias: Tensor | None, cols: int) -> None:
    _same_dtype(op, x, bias=bias)
    if bias is not None and bias.shape != (cols,):
        raise _bad(f"kiln.torch.{op}: bias must be [{cols}]; got {tuple(bias.shape)}")


@_Op
def _bias_gelu(x: Tensor, bias: Tensor | None) -> Tensor:
    rows, cols = _rows_cols("bias_gelu", x)
    _bias_check("bias_gelu", x, bias, cols)
    dt = rt.dtype_code(x, "x")
    x = _c(x)
    y = _new(x.shape, x.dtype, x)
    if rows == 0:
        return y
    bias = _c_opt(bias)  # kept alive across the launch
    bp = rt.ptr(bias)
    _run("bias_gelu", x, "kiln_bias_gelu_fwd", dt, y.data_ptr(), x.data_ptr(), bp, rows, cols)
    return y


@_Op
def _bias_gelu_backward(dy: Tensor, x: Tensor, bias: Tensor | None) -> Tensor:
    rows, cols = _rows_cols("bias_gelu_backward", x)
    _bias_check("bias_gelu_backward", x, bias, cols)
    _match("bias_gelu_backward", "x", x, dy=dy)
    rt.dtype_code(x, "x")
    dy, x = _c(dy), _c(x)
    dx = _new(x.shape, x.dtype, x)
    if rows == 0:
        return dx
    bias = _c_opt(bias)  # kept alive across the launch
    bp = rt.ptr(bias)
    _run(
        "bias_gelu", x, "kiln_bias_gelu_bwd", rt.dtype_code(x, "x"), dx.data_ptr(), dy.data_ptr(),
        x.data_ptr(), bp, rows, cols,
    )
    return dx


@_Op
def _bias_swiglu(x: Tensor, bias: Tensor | None) -> Tensor:
    rows, cols2 = _rows_cols("bias_swiglu", x)
    if cols2 % 2:
        raise _bad(f"kiln.torch.bias_swiglu: x's last dimension ({cols2}) must be even: [a | b]")
    _bias_check("bias_swiglu", x, bias, cols2)
    rt.dtype_code(x, "x")
    x = _c(x)
    y = _new((*x.shape[:-1], cols2 // 2), x.dtype, x)
    if rows == 0:
        return y
    bias = _c_opt(bias)  # kept alive across the launch
    bp = rt.ptr(bias)
    _run(
        "bias_swiglu", x, "kiln_bias_swiglu_fwd", rt.dtype_code(x, "x"), y.data_ptr(), x.data_ptr(),
        bp, rows, cols2 // 2,
    )
    return y


@_Op
def _bias_swiglu_backward(dy: Tensor, x: Tensor, bias: Tensor | None) -> Tensor:
    rows, cols2 = _rows_cols("bias_swiglu_backward", x)
    if cols2 % 2:
        raise _bad(f"kiln.torch.bias_swiglu_backward: x's last dimension ({cols2}) must be even: [a | b]")
    _bias_check("bias_swiglu_backward", x, bias, cols2)
    if dy.shape != (*x.shape[:-1], cols2 // 2) or dy.dtype != x.dtype or dy.device != x.device:
        raise _bad(
            f"kiln.torch.bias_swiglu_backward: dy is {dy.dtype} {tuple(dy.shape)} on {dy.device}; want "
            f"{x.dtype} {(*x.shape[:-1], cols2 // 2)} on {x.device} (x {tuple(x.shape)} halved)"
        )
    rt.dtype_code(x, "x")
    dy, x = _c(dy), _c(x)
    dx = _new(x.shape, x.dtype, x)
    if rows == 0:
        return dx
    bias = _c_opt(bias)  # kept alive across the launch
    bp = rt.ptr(bias)
    _run(
        "bias_swiglu", x, "kiln_bias_swiglu_bwd", rt.dtype_code(x, "x"), dx.data_ptr(), dy.data_ptr(),
        x.data_ptr(), bp, rows, cols2 // 2,
    )
    return dx


_bias_gelu.register_fake(lambda x, bias: _new(x.shape, x.dtype, x))
_bias_gelu_backward.register_fake(lambda dy, x, bias: _new(x.shape, x.dtype, x))
_bias_swiglu.register_fake(lambda x, bias: _new((*x.shape[:-1], x.shape[-1] // 2), x.dtype, x))
_bias_swiglu_backward.register_fake(lambda dy, x, bias: _new(x.shape, x.dtype, x))


def _bias_act_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    x, bias = inputs
    ctx.save_for_backward(x, bias)


def _bias_grad(ctx, dx, bias):  # type: ignore[no-untyped-def]
    if bias is not None and ctx.needs_input_grad[1]:
        return dx.reshape(-1, dx.shape[-1]).sum(0, dtype=torch.float32).to(bias.dtype)
    return None


def _bias_gelu_grad(ctx, dy):  # type: ignore[no-untyped-def]
    x, bias = ctx.saved_tensors
    dx = _bias_gelu_backward(dy, x, bias)
    return dx, _bias_grad(ctx, dx, bias)


def _bias_swiglu_grad(ctx, dy):  # type: ignore[no-untyped-def]
    x, bias = ctx.saved_tensors
    dx = _bias_swiglu_backward(dy, x, bias)
    return dx, _bias_grad(ctx, dx, bias)


_bias_gelu.register_autograd(_bias_gelu_grad, setup_context=_bias_act_setup)
_bias_swiglu.register_autograd(_bias_swiglu_grad, setup_context=_bias_act_setup)
_bias_gelu_backward.register_autograd(_no_double_backward("bias_gelu"), setup_context=_no_setup)
_bias_swiglu_backward.register_autograd(_no_double_backward("bias_swiglu"), setup_context=_no_setup)


# ---- bias + dropout + residual add -------------------------------------------------------------


@_Op
def _philox_seed_offset(like: Tensor) -> Tensor:
    """Draws (seed, offset) for one dropout call from torch's generator of
    like's device and advances it: an int64 [2] CPU tensor. On CUDA: the
    generator's seed and Philox offset (offset += 4, as torch's own ops step
    it); torch.manual_seed and a restored RNG state (activation
    recomputation) give the same pair again."""
    if like.device.type == "cuda":
        if rt.capturing():
            raise KilnUnsupported(
                "kiln.torch.bias_dropout_add: dropout cannot be captured in a CUDA graph: each "
                "replay would repeat the captured mask, and torch's graph-safe generator state "
                "is not reachable without a C++ extension (docs/python.md); capture with "
                "training=False or p=0, or leave dropout outside the graph",
                status="KILN_EUNSUPPORTED",
                code=-12,
            )
        idx = like.device.index if like.device.index is not None else torch.cuda.current_device()
        gen = torch.cuda.default_generators[idx]
        seed, offset = gen.initial_seed(), gen.get_offset()
        gen.set_offset(offset + 4)
    else:
        seed = int(torch.randint(0, 2**62, (1,)).item())
        offset = 0
    return torch.tensor([seed & (2**63 - 1), offset], dtype=torch.int64)


@_philox_seed_offset.register_fake
def _(like):  # type: ignore[no-untyped-def]
    return torch.empty(2, dtype=torch.int64, device="cpu")


def _dropout_args(op: str, p: float, training: bool) -> None:
    # eval is the identity for any p, 1 included; training with p = 1 would
    # scale by 1 / (1 - p)
    if training and not 0.0 <= p < 1.0:
        raise _bad(f"kiln.torch.{op}: p = {p}; want 0 <= p < 1 when training")
    if not training and not 0.0 <= p <= 1.0:
        raise _bad(f"kiln.torch.{op}: p = {p}; want 0 <= p <= 1")


def _seed_offset(op: str, so: Tensor) -> tuple[int, int]:
    if so.dtype != torch.int64 or so.shape != (2,):
        raise _bad(f"kiln.torch.{op}: seed_offset is {so.dtype} {tuple(so.shape)}; want int64 [2]")
    seed, offset = (int(v) for v in so.tolist())
    if seed < 0 or offset < 0:  # they reach C as uint64: never wrapped
        raise _bad(f"kiln.torch.{op}: seed_offset ({seed}, {offset}) must not be negative")
    return seed, offset


@_Op
def _bias_dropout_add(
    x: Tensor, bias: Tensor | None, residual: Tensor, p: float, training: bool, seed_offset: Tensor
) -> Tensor:
    _dropout_args("bias_dropout_add", p, training)
    rows, cols = _rows_cols("bias_dropout_add", x)
    _bias_check("bias_dropout_add", x, bias, cols)
    _same_dtype("bias_dropout_add", x, residual=residual)
    if residual.shape != x.shape:
        raise _bad(f"kiln.torch.bias_dropout_add: residual {tuple(residual.shape)} != x {tuple(x.shape)}")
    seed, offset = _seed_offset("bias_dropout_add", seed_offset)
    dt = rt.dtype_code(x, "x")
    x, residual = _c(x), _c(residual)
    y = _new(x.shape, x.dtype, x)
    if rows == 0:
        return y
    bias = _c_opt(bias)  # kept alive across the launch
    bp = rt.ptr(bias)
    _run(
        "bias_dropout_add", x, "kiln_bias_dropout_add_fwd", dt, y.data_ptr(),
        x.data_ptr(), bp, residual.data_ptr(), rows, cols, p, seed, offset, int(training),
    )
    return y


@_Op
def _bias_dropout_add_backward(dy: Tensor, p: float, training: bool, seed_offset: Tensor) -> Tensor:
    _dropout_args("bias_dropout_add_backward", p, training)
    rows, cols = _rows_cols("bias_dropout_add_backward", dy)
    seed, offset = _seed_offset("bias_dropout_add_backward", seed_offset)
    dt = rt.dtype_code(dy, "dy")
    dy = _c(dy)
    dx = _new(dy.shape, dy.dtype, dy)
    if rows == 0:
        return dx
    _run(
        "bias_dropout_add", dy, "kiln_bias_dropout_add_bwd", dt, dx.data_ptr(),
        dy.data_ptr(), rows, cols, p, seed, offset, int(training),
    )
    return dx


_bias_dropout_add.register_fake(lambda x, bias, residual, p, training, so: _new(x.shape, x.dtype, x))
_bias_dropout_add_backward.register_fake(lambda dy, p, training, so: _new(dy.shape, dy.dtype, dy))


def _bda_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _, bias, _, p, training, so = inputs
    ctx.save_for_backward(so)
    ctx.p, ctx.training, ctx.has_bias = p, training, bias is not None
    ctx.bias_dtype = bias.dtype if bias is not None else None


def _bda_grad(ctx, dy):  # type: ignore[no-untyped-def]
    (so,) = ctx.saved_tensors
    dx = _bias_dropout_add_backward(dy, ctx.p, ctx.training, so)
    dbias = None
    if ctx.has_bias and ctx.needs_input_grad[1]:
        dbias = dx.reshape(-1, dx.shape[-1]).sum(0, dtype=torch.float32).to(ctx.bias_dtype)
    return dx, dbias, dy, None, None, None


_bias_dropout_add.register_autograd(_bda_grad, setup_context=_bda_setup)


def _bda_bwd_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _, p, training, so = inputs
    ctx.save_for_backward(so)
    ctx.p, ctx.training = p, training


def _bda_bwd_grad(ctx, g):  # type: ignore[no-untyped-def]
    # dx = dy * keep / (1 - p) is linear in dy and its own adjoint: the same
    # mask applied to g (double backward)
    (so,) = ctx.saved_tensors
    return _bias_dropout_add_backward(g, ctx.p, ctx.training, so), None, None, None


_bias_dropout_add_backward.register_autograd(_bda_bwd_grad, setup_context=_bda_bwd_setup)


# ---- RoPE ------------------------------------------------------------------------------------

_LAYOUTS = {"sbhd": 0, "bshd": 1}


def _rope_shape(x: Tensor, angles: Tensor, layout: str) -> tuple[int, int, int, int, int]:
    if layout not in _LAYOUTS:
        raise _bad(f"kiln.torch.rope: layout '{layout}'; want 'sbhd' or 'bshd'")
    if x.dim() != 4:
        raise _bad(f"kiln.torch.rope: want x [{', '.join(layout)}]; got {tuple(x.shape)}")
    s, b, h, d = x.shape if layout == "sbhd" else (x.shape[1], x.shape[0], x.shape[2], x.shape[3])
    if angles.dtype != torch.float32 or angles.dim() != 2 or angles.shape[0] != s:
        raise _bad(
            f"kiln.torch.rope: angles must be float32 [s={s}, rot_dim/2]; got "
            f"{angles.dtype} {tuple(angles.shape)}"
        )
    if angles.device != x.device:
        raise _bad(f"kiln.torch.rope: angles are on {angles.device}, x on {x.device}")
    if d == 0 or not 2 <= 2 * angles.shape[1] <= d:
        raise _bad(f"kiln.torch.rope: rot_dim = 2 * angles.shape[1] = {2 * angles.shape[1]} must be in [2, d = {d}]")
    return s, b, h, d, 2 * angles.shape[1]


def _rope_launch(fn: str, out: Tensor, x: Tensor, angles: Tensor, layout: str, interleaved: bool) -> None:
    s, b, h, d, rot = _rope_shape(x, angles, layout)
    if out.numel() == 0:
        return
    angles = _c(angles)
    _run(
        "rope", x, fn, rt.dtype_code(x, "x"), _LAYOUTS[layout], int(interleaved), out.data_ptr(),
        x.data_ptr(), angles.data_ptr(), s, b, h, d, rot,
    )


@_Op
def _rope(x: Tensor, angles: Tensor, layout: str, interleaved: bool) -> Tensor:
    rt.dtype_code(x, "x")
    x = _c(x)
    y = _new(x.shape, x.dtype, x)
    _rope_launch("kiln_rope_fwd", y, x, angles, layout, interleaved)
    return y


@_Op
def _rope_backward(dy: Tensor, angles: Tensor, layout: str, interleaved: bool) -> Tensor:
    rt.dtype_code(dy, "dy")
    dy = _c(dy)
    dx = _new(dy.shape, dy.dtype, dy)
    _rope_launch("kiln_rope_bwd", dx, dy, angles, layout, interleaved)
    return dx


_rope.register_fake(lambda x, angles, layout, interleaved: _new(x.shape, x.dtype, x))
_rope_backward.register_fake(lambda dy, angles, layout, interleaved: _new(dy.shape, dy.dtype, dy))


def _rope_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _, angles, layout, interleaved = inputs
    ctx.save_for_backward(angles)
    ctx.layout, ctx.interleaved = layout, interleaved


def _rope_grad(ctx, dy):  # type: ignore[no-untyped-def]
    (angles,) = ctx.saved_tensors
    return _rope_backward(dy, angles, ctx.layout, ctx.interleaved), None, None, None


_rope.register_autograd(_rope_grad, setup_context=_rope_setup)


def _rope_bwd_grad(ctx, g):  # type: ignore[no-untyped-def]
    # the backward rotates by -angle, linear in dy: its adjoint is the
    # forward rotation (double backward)
    (angles,) = ctx.saved_tensors
    return _rope(g, angles, ctx.layout, ctx.interleaved), None, None, None


_rope_backward.register_autograd(_rope_bwd_grad, setup_context=_rope_setup)


# ---- cross-entropy ------------------------------------------------------------------------------


def _ce_args(logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor, int, int]:
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise _bad(
            "kiln.torch.cross_entropy: want logits [rows, vocab] and target [rows]; got "
            f"{tuple(logits.shape)} and {tuple(target.shape)}"
        )
    if logits.shape[1] == 0:
        raise _bad(f"kiln.torch.cross_entropy: logits {tuple(logits.shape)} has no vocabulary")
    rt.dtype_code(logits, "logits")
    return _c(logits), _ids("cross_entropy", target, logits), logits.shape[0], logits.shape[1]


@_Op
def _cross_entropy(logits: Tensor, target: Tensor, ignore_index: int, sync_check: bool) -> tuple[Tensor, Tensor]:
    logits, target, rows, vocab = _ce_args(logits, target)
    loss = _new(rows, torch.float32, logits)
    lse = _new(rows, torch.float32, logits)
    if rows == 0:
        return loss, lse
    flags = KILN_OPS_SYNC_CHECK if sync_check else 0
    _run(
        "cross_entropy", logits, "kiln_cross_entropy_fwd", rt.dtype_code(logits, "logits"),
        loss.data_ptr(), lse.data_ptr(), logits.data_ptr(), target.data_ptr(), rows, vocab,
        ignore_index, flags,
    )
    return loss, lse


@_cross_entropy.register_fake
def _(logits, target, ignore_index, sync_check):  # type: ignore[no-untyped-def]
    return _new(logits.shape[:1], torch.float32, logits), _new(logits.shape[:1], torch.float32, logits)


@_Op
def _cross_entropy_backward(
    logits: Tensor, lse: Tensor, dloss: Tensor, target: Tensor, vocab_start: int, ignore_index: int
) -> Tensor:
    logits, target, rows, vocab = _ce_args(logits, target)
    _f32("cross_entropy_backward", "lse", lse, (rows,), logits)
    _f32("cross_entropy_backward", "dloss", dloss, (rows,), logits)
    if vocab_start < 0:
        raise _bad(f"kiln.torch.cross_entropy_backward: vocab_start = {vocab_start}, must be >= 0")
    grad = logits.clone(memory_format=torch.contiguous_format)
    if rows == 0:
        return grad
    lse, dloss = _c(lse), _c(dloss)
    _run(
        "cross_entropy", grad, "kiln_cross_entropy_bwd", rt.dtype_code(grad, "logits"),
        grad.data_ptr(), lse.data_ptr(), dloss.data_ptr(), target.data_ptr(), rows, vocab,
        vocab_start, ignore_index,
    )
    return grad


_cross_entropy_backward.register_fake(lambda logits, lse, dloss, target, vs, ii: _new(logits.shape, logits.dtype, logits))


def _ce_setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    logits, target, ignore_index, _ = inputs
    ctx.save_for_backward(logits, target, output[1])
    ctx.ignore_index = ignore_index


def _ce_grad(ctx, dloss, _dlse):  # type: ignore[no-untyped-def]
    logits, target, lse = ctx.saved_tensors
    dloss = dloss.to(torch.float32)
    return _cross_entropy_backward(logits, lse, dloss, target, 0, ctx.ignore_index), None, None, None


_cross_entropy.register_autograd(_ce_grad, setup_context=_ce_setup)
_cross_entropy_backward.register_autograd(_no_double_backward("cross_entropy"), setup_context=_no_setup)


@_Op
def _cross_entropy_stats(
    logits: Tensor, target: Tensor, vocab_start: int, vocab_size: int, ignore_index: int, sync_check: bool
) -> tuple[Tensor, Tensor, Tensor]:
    logits, target, rows, part = _ce_args(logits, target)
    row_max = _new(rows, torch.float32, logits)
    sumexp, tgt = _new(rows, torch.float32, logits), _new(rows, torch.float32, logits)
    if rows == 0:
        return row_max, sumexp, tgt
    flags = KILN_OPS_SYNC_CHECK if sync_check else 0
    _run(
        "cross_entropy", logits, "kiln_cross_entropy_stats", rt.dtype_code(logits, "logits"),
        row_max.data_ptr(), sumexp.data_ptr(), tgt.data_ptr(), logits.data_ptr(), target.data_ptr(),
        rows, part, vocab_start, vocab_size, ignore_index, flags,
    )
    return row_max, sumexp, tgt


@_cross_entropy_stats.register_fake
def _(logits, target, vocab_start, vocab_size, ignore_index, sync_check):  # type: ignore[no-untyped-def]
    return tuple(_new(logits.shape[:1], torch.float32, logits) for _ in range(3))


def _ce_tp_forward(
    logits: Tensor, target: Tensor, ignore_index: int, group: object, vocab_start: int | None, sync_check: bool
) -> tuple[Tensor, Tensor]:
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    part = logits.shape[-1]
    start = rank * part if vocab_start is None else vocab_start
    sizes = torch.tensor([part], dtype=torch.int64, device=logits.device)
    dist.all_reduce(sizes, group=group)
    vocab_size = int(sizes.item())
    row_max, sumexp, tgt = _cross_entropy_stats(logits, target, start, vocab_size, ignore_index, sync_check)
    gmax = row_max.clone()
    dist.all_reduce(gmax, op=dist.ReduceOp.MAX, group=group)
    dev = rt.ordinal(logits.device)
    h = rt.resolve(dev, "cross_entropy")
    check(
        lib.kiln_cross_entropy_rescale(
            h, sumexp.data_ptr(), row_max.data_ptr(), gmax.data_ptr(), row_max.numel(), rt.stream(logits)
        )
    )
    dist.all_reduce(sumexp, group=group)
    dist.all_reduce(tgt, group=group)
    loss, lse = torch.empty_like(sumexp), torch.empty_like(sumexp)
    target = _c(target)
    check(
        lib.kiln_cross_entropy_loss(
            h, loss.data_ptr(), lse.data_ptr(), gmax.data_ptr(), sumexp.data_ptr(), tgt.data_ptr(),
            target.data_ptr(), row_max.numel(), ignore_index, rt.stream(logits),
        )
    )
    return loss, lse


class _CrossEntropyTP(torch.autograd.Function):
    """Vocabulary-parallel cross-entropy: three launches around three
    all-reduces over the tensor-parallel group (include/kiln/ops.h)."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, group, vocab_start, sync_check):  # type: ignore[no-untyped-def]
        loss, lse = _ce_tp_forward(logits, target, ignore_index, group, vocab_start, sync_check)
        import torch.distributed as dist

        start = dist.get_rank(group) * logits.shape[-1] if vocab_start is None else vocab_start
        ctx.save_for_backward(logits, target, lse)
        ctx.start, ctx.ignore_index = start, ignore_index
        return loss

    @staticmethod
    def backward(ctx, dloss):  # type: ignore[no-untyped-def]
        logits, target, lse = ctx.saved_tensors
        g = _cross_entropy_backward(logits, lse, dloss.to(torch.float32).contiguous(), target, ctx.start, ctx.ignore_index)
        return g, None, None, None, None, None


_register()


# ---- the functional API ---------------------------------------------------------------------------


def scaled_softmax(x: Tensor, scale: float = 1.0) -> Tensor:
    """softmax(scale * x) over the last dimension (Megatron's
    ScaledSoftmax). x: [..., cols], float32/float16/bfloat16."""
    return _scaled_softmax.call(x, float(scale))


def scaled_masked_softmax(x: Tensor, mask: Tensor, scale: float = 1.0) -> Tensor:
    """softmax(scale * x) with masked positions (mask != 0, True = masked)
    excluded: x [b, heads, sq, sk], mask [b or 1, 1, sq, sk] bool or uint8.
    A fully masked row is all zeros (torch gives NaN)."""
    return _scaled_masked_softmax.call(x, mask, float(scale))


def scaled_upper_triang_masked_softmax(x: Tensor, scale: float = 1.0) -> Tensor:
    """Causal softmax(scale * x): x [attn_batches, sq, sk], key j > query i masked."""
    return _scaled_upper_triang_masked_softmax.call(x, float(scale))


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """F.layer_norm over the last dimension. weight, bias: [cols], float32 or x's dtype."""
    return _layer_norm.call(x, weight, bias, float(eps))[0]


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-5) -> Tensor:
    """x * rsqrt(mean(x^2) + eps) * weight over the last dimension. weight:
    [cols], float32 or x's dtype."""
    return _rms_norm.call(x, weight, float(eps))[0]


def embedding(
    ids: Tensor,
    weight: Tensor,
    vocab_start: int = 0,
    vocab_size: int | None = None,
    sync_check: bool = False,
) -> Tensor:
    """Rows of a vocabulary partition by token id: weight [vocab_part, hidden]
    holds ids [vocab_start, vocab_start + vocab_part) of [0, vocab_size)
    (default: the partition is the vocabulary, TP = 1). An id of another
    partition gives a zero row (the TP all-reduce sums them). An id outside
    [0, vocab_size) is a data error: its row is zeros and kiln.torch.check()
    raises KilnInvalidArgument naming it (at once with sync_check=True), at
    TP = 1 and TP > 1 alike, never a device-side assert. ids: int64 [...];
    returns [..., hidden]. The weight gradient is deterministic."""
    # ints reach C as int64: checked here, never wrapped by ctypes
    vocab_start = int_arg("kiln.torch.embedding: vocab_start", vocab_start, 0, _I64_MAX)
    vs = vocab_start + weight.shape[0] if vocab_size is None else vocab_size
    vs = int_arg("kiln.torch.embedding: vocab_size", vs, 0, _I64_MAX)
    return _embedding.call(ids, weight, vocab_start, vs, bool(sync_check))


def bias_gelu(x: Tensor, bias: Tensor | None = None) -> Tensor:
    """gelu(x + bias, approximate="tanh"); bias [cols] or None."""
    return _bias_gelu.call(x, bias)


def bias_swiglu(x: Tensor, bias: Tensor | None = None) -> Tensor:
    """silu(a + bias_a) * (b + bias_b) with x = [a | b] on the last dimension
    ([..., 2c] -> [..., c]); bias [2c] or None."""
    return _bias_swiglu.call(x, bias)


def bias_dropout_add(
    x: Tensor, bias: Tensor | None, residual: Tensor, p: float, training: bool = True
) -> Tensor:
    """residual + dropout(x + bias, p). The mask comes from torch's generator
    of x's device (seed and Philox offset, advanced per call): torch.manual_seed
    reproduces it, and a restored RNG state (activation recomputation) gives
    the same mask; the backward regenerates it. Refused under CUDA graph
    capture when training with p > 0 (docs/python.md)."""
    if not training or p == 0.0:
        so = torch.zeros(2, dtype=torch.int64)
    else:
        so = _philox_seed_offset.call(x)
    return _bias_dropout_add.call(x, bias, residual, float(p), bool(training), so)


def rope(x: Tensor, angles: Tensor, layout: str = "sbhd", interleaved: bool = False) -> Tensor:
    """Rotary position embedding. x [s, b, h, d] ("sbhd") or [b, s, h, d]
    ("bshd"); angles float32 [s, rot_dim / 2], the angle of each rotated pair
    at each position. The first rot_dim features of each head are rotated:
    pairs (i, i + rot_dim/2) (rotate-half: GPT-NeoX, Llama) or (2i, 2i+1)
    with interleaved=True (GPT-J); the rest are copied."""
    return _rope.call(x, angles, layout, bool(interleaved))


def cross_entropy(
    logits: Tensor,
    target: Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
    group: object | None = None,
    vocab_start: int | None = None,
    sync_check: bool = False,
) -> Tensor:
    """F.cross_entropy over logits [rows, vocab] and int64 targets [rows].
    With a process group (tensor parallel): logits are this rank's columns of
    the vocabulary (vocab_start default rank * vocab_part) and three small
    all-reduces over group combine them. A target outside [0, vocab_size)
    other than ignore_index is a data error (kiln.torch.check, or at once
    with sync_check=True). reduction "mean" (over non-ignored rows), "sum" or
    "none" (fp32 per row); "mean" with every target ignored is NaN, as in
    torch."""
    if reduction not in ("mean", "sum", "none"):
        raise _bad(f"kiln.torch.cross_entropy: reduction '{reduction}'; want mean, sum or none")
    ignore_index = int_arg("kiln.torch.cross_entropy: ignore_index", ignore_index, -_I64_MAX - 1, _I64_MAX)
    if vocab_start is not None:
        vocab_start = int_arg("kiln.torch.cross_entropy: vocab_start", vocab_start, 0, _I64_MAX)
    tp = group is not None
    if tp:
        import torch.distributed as dist

        tp = dist.get_world_size(group) > 1
    if tp:
        loss = _CrossEntropyTP.apply(logits, target, ignore_index, group, vocab_start, sync_check)
    else:
        loss = _cross_entropy.call(logits, target, ignore_index, bool(sync_check))[0]
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    # every target ignored (or no rows): 0 / 0 = NaN, as torch gives
    return loss.sum() / (target != ignore_index).sum()


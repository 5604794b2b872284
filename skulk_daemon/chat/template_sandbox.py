"""The sandboxed Jinja environment chat templates render in, and the bounds it keeps.

A card is data: its template comes from any operator of the cluster, or from the
GGUF metadata of any model a trusted caller adds. Jinja's sandbox keeps it from the
filesystem and Python internals; this module also keeps it from stalling the node or
exhausting its memory, by bounding what a template can do at every place it can
spend time or build something large:

- time: every call, operator, loop step and output part checks the render's deadline
  (``RENDER_SECONDS`` of :mod:`skulk_daemon.chat.template_budget`);
- iteration: every ``for`` loop (and every ``loop(...)`` of a recursive one) counts
  its steps against that module's ``MAX_LOOP_STEPS`` for the whole render, and
  ``range`` yields at most :data:`MAX_RANGE` items;
- size: no value a template builds may exceed :data:`MAX_VALUE_CHARS`. What could
  allocate more than it is given (``*``, ``+``, ``%``, ``~``, string methods such as
  ``replace``/``join``/``center``, filters such as ``replace``/``join``/``indent``/
  ``format``/``wordwrap``, set blocks and macros joining their output) is sized
  *before* it runs; every filter's and method's string or list answer is sized after.
"""

from __future__ import annotations

import functools
import json
import operator
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Final, TypeVar

import jinja2
from jinja2 import nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from skulk_daemon.chat.template_budget import (
    DEADLINE_EVERY,
    MAX_PROMPT_CHARS,
    PromptError,
    check_deadline,
    count_step,
)

MAX_RANGE: Final = 10_000
"""Items one ``range`` may yield; a chat template loops over messages, not numbers."""
MAX_VALUE_CHARS: Final = MAX_PROMPT_CHARS
"""The largest string (or weight of a list, in characters) a template may build on the
way: nothing larger could become part of a prompt."""
MAX_FORMAT_WIDTH: Final = 1024
"""The widest padding or precision a format (``%``, ``format``) may ask for."""
MAX_JSON_INDENT: Final = 16
"""The deepest indentation ``tojson`` may be asked for."""

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_WIDTHS = re.compile(r"\d+")
_T = TypeVar("_T")


def _bounded_iter(iterable: Iterable[_T]) -> Iterator[_T]:
    for item in iterable:
        count_step()
        yield item


def _iterable(value: object) -> Iterable[object]:
    """A template value to iterate; what ``iter`` would refuse raises as it would."""
    if isinstance(value, Iterable):
        return value
    raise TypeError(f"{type(value).__name__!r} object is not iterable")


def _too_big(what: str) -> PromptError:
    return PromptError(f"the chat template {what} beyond the {MAX_VALUE_CHARS}-character bound")


def weight(value: object, limit: int = MAX_VALUE_CHARS) -> int:
    """About how many characters ``value`` would print as; stops counting past ``limit``.

    Containers weigh their items (a list of one long string repeated is as heavy as
    the string times the count), so a structure cannot hide its size behind sharing.
    """
    total = 0
    pending: list[object] = [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, Mapping):
            total += len(item) + 1
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item) + 1
            pending.extend(item)
        else:
            total += 1
    return total


def _checked(value: _T, what: str) -> _T:
    if isinstance(value, str | bytes | list | tuple | dict) and weight(value) > MAX_VALUE_CHARS:
        raise _too_big(what)
    return value


def _need(size: int, what: str) -> None:
    if size > MAX_VALUE_CHARS:
        raise _too_big(what)


def _check_percent_format(text: str) -> None:
    for match in _PERCENT_SPEC.finditer(text):
        for width in match.groups():
            if width == "*" or (width and int(width) > MAX_FORMAT_WIDTH):
                raise PromptError("the chat template asked for too wide a format")


def _check_brace_format(text: str) -> None:
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise PromptError(f"the chat template used an invalid format: {exc}") from None
    for _, _, spec, _ in fields:
        if spec and ("{" in spec or any(int(w) > MAX_FORMAT_WIDTH for w in _WIDTHS.findall(spec))):
            raise PromptError("the chat template asked for too wide a format")


def _replaced_size(text: str, old: str, new: str, count: int | None) -> int:
    found = text.count(old) if old else len(text) + 1
    if count is not None and count >= 0:
        found = min(found, count)
    return len(text) + found * max(0, len(new) - len(old))


def _joined_size(separator: str, items: list[object]) -> int:
    return sum(weight(item) for item in items) + len(separator) * max(0, len(items) - 1)


def _check_str_method(text: str, name: str, args: tuple[object, ...]) -> tuple[object, ...]:
    """Size an amplifying ``str`` method before it runs; the args it should run with."""
    match name:
        case "replace" if len(args) >= 2:
            count = args[2] if len(args) > 2 else None
            # A count that is no int makes ``str.replace`` itself raise TypeError.
            limit = count if isinstance(count, int) else None
            _need(_replaced_size(text, str(args[0]), str(args[1]), limit), "replaced a string")
        case "join" if args:
            items = list(_bounded_iter(_iterable(args[0])))
            _need(_joined_size(text, items), "joined a string")
            return (items, *args[1:])
        case "center" | "ljust" | "rjust" | "zfill" if args and isinstance(args[0], int):
            _need(args[0], "padded a string")
        case "expandtabs":
            tab = args[0] if args and isinstance(args[0], int) else 8
            _need(len(text) * max(tab, 1), "expanded tabs")
        case "translate" if args and isinstance(args[0], Mapping):
            longest = max((weight(v) for v in args[0].values()), default=1)
            _need(len(text) * max(longest, 1), "translated a string")
    return args


def _filter_checks(
    name: str, args: tuple[object, ...], kwargs: Mapping[str, object]
) -> tuple[object, ...]:
    """Size what an amplifying filter would build; the args it should run with.

    ``args`` start with the filtered value (any context the filter takes is removed).
    """
    value, rest = args[0], args[1:]
    text = value if isinstance(value, str) else None
    match name:
        case "replace" if text is not None and len(rest) >= 2:
            count = rest[2] if len(rest) > 2 else kwargs.get("count")
            # A count that is no int makes the ``replace`` filter itself raise TypeError.
            limit = count if isinstance(count, int) else None
            _need(_replaced_size(text, str(rest[0]), str(rest[1]), limit), "replaced a string")
        case "join":
            items = list(_bounded_iter(_iterable(value)))
            separator = rest[0] if rest else kwargs.get("d", "")
            _need(_joined_size(str(separator), items), "joined a string")
            return (items, *rest)
        case "format" if text is not None:
            _check_percent_format(text)
        case "center":
            width = rest[0] if rest else kwargs.get("width", 80)
            _need(width if isinstance(width, int) else 0, "padded a string")
        case "indent" if text is not None:
            width = rest[0] if rest else kwargs.get("width", 4)
            pad = width if isinstance(width, int) else len(str(width))
            _need(len(text) + pad * (text.count("\n") + 1), "indented a string")
        case "wordwrap" if text is not None:
            width = rest[0] if rest else kwargs.get("width", 79)
            wrap = rest[2] if len(rest) > 2 else kwargs.get("wrapstring")
            lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n")
            _need(len(text) + (lines + 1) * len(str(wrap or "\n")), "wrapped a string")
        case "batch" | "slice":
            size = rest[0] if rest else kwargs.get("linecount", kwargs.get("slices", 0))
            if isinstance(size, int) and size > MAX_RANGE:
                raise PromptError(f"the chat template asked for a {name} of {size}")
        case "sum":
            start = rest[1] if len(rest) > 1 else kwargs.get("start", 0)
            if not isinstance(start, int | float):
                raise PromptError("the chat template summed sequences; join them instead")
    return args


def _bounded_filter(name: str, function: Callable[..., object]) -> Callable[..., object]:
    passes_context = getattr(function, "jinja_pass_arg", None) is not None

    @functools.wraps(function)
    def bounded(*args: object, **kwargs: object) -> object:
        check_deadline()
        head, body = (args[:1], args[1:]) if passes_context else ((), args)
        if body:
            body = _filter_checks(name, body, kwargs)
        return _checked(function(*head, *body, **kwargs), f"filter {name} built a value")

    return bounded


def _bounded_range(*args: int) -> Iterator[int]:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise PromptError(f"the chat template asked for a range of {len(numbers)} items")
    return _bounded_iter(numbers)


def _bounded_repeat(left: object, right: object) -> object:
    # NOTE: "x" * 10**9 would allocate before anything else could stop it.
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, str | list | tuple) and isinstance(count, int):
            _need(weight(sequence) * max(count, 0), "repeated a value")
    return operator.mul(left, right)


def _bounded_add(left: object, right: object) -> object:
    if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
        _need(weight(left) + weight(right), "added values")
    return operator.add(left, right)


def _bounded_join(parts: Iterable[object]) -> str:
    """What Jinja joins a block's, macro's or ``~``'s parts with, sized as it goes."""
    texts: list[str] = []
    size = 0
    for part in parts:
        text = str(part)
        size += len(text)
        _need(size, "joined its output")
        texts.append(text)
        if len(texts) % DEADLINE_EVERY == 0:
            check_deadline()
    return "".join(texts)


def _raise_exception(message: str) -> None:
    raise PromptError(message)


def _tojson(value: object, indent: int | None = None) -> str:
    if indent is not None and not 0 <= indent <= MAX_JSON_INDENT:
        raise PromptError(f"the chat template asked tojson for an indent of {indent}")
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return str(_checked(text, "encoded JSON"))


class _BoundedTemplate(jinja2.Template):
    @classmethod
    def _from_namespace(
        cls,
        environment: jinja2.Environment,
        namespace: MutableMapping[str, object],
        globals: MutableMapping[str, object],
    ) -> jinja2.Template:
        # NOTE: ``~`` compiles to a call of the module-level ``str_join``/``markup_join``
        # the generated code imports; rebinding them in the template's own namespace is
        # the one place that sizes every concatenation (autoescape is off here).
        namespace["str_join"] = namespace["markup_join"] = _bounded_join
        return super()._from_namespace(environment, namespace, globals)


def _bound_loops(tree: nodes.Template) -> nodes.Template:
    """Wraps every ``for`` loop's iterable in the environment's step counter."""
    for loop in list(tree.find_all(nodes.For)):
        counted = nodes.Call(
            nodes.EnvironmentAttribute("bounded_iter"), [loop.iter], [], None, None
        )
        loop.iter = counted.set_lineno(loop.lineno)
    return tree


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, plus the time, iteration and size bounds above."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    template_class = _BoundedTemplate
    # Blocks, macros and ``{% set %}`` blocks join their output with this.
    concat = staticmethod(_bounded_join)
    bounded_iter = staticmethod(_bounded_iter)

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.globals["range"] = _bounded_range
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = lambda fmt: datetime.now(UTC).strftime(fmt)
        self.filters["tojson"] = _tojson
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _bound_loops(super()._parse(source, name, filename))

    def call_binop(
        self, context: jinja2.runtime.Context, operator_: str, left: object, right: object
    ) -> object:
        check_deadline()
        match operator_:
            case "*":
                return _bounded_repeat(left, right)
            case "+":
                return _bounded_add(left, right)
            case "%":
                if isinstance(left, str):
                    _check_percent_format(left)
                return _checked(operator.mod(left, right), "formatted a string")
            case _:
                if isinstance(right, int) and abs(right) > 64:
                    raise PromptError("the chat template raised a number to too large a power")
                return super().call_binop(context, operator_, left, right)

    def call(
        self, context: jinja2.runtime.Context, obj: object, /, *args: object, **kwargs: object
    ) -> object:
        check_deadline()
        if isinstance(obj, LoopContext) and args:
            # A recursive loop's ``loop(children)`` iterates outside the ``for`` node.
            args = (_bounded_iter(_iterable(args[0])), *args[1:])
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, str):
            args = _check_str_method(owner, getattr(obj, "__name__", ""), args)
        return _checked(super().call(context, obj, *args, **kwargs), "call built a value")

    def wrap_str_format(self, value: object) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        # The base wraps only ``str.format``/``format_map`` bound to a string.
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str):
            _check_brace_format(owner)
        return wrapped


def compile_template(source: str) -> jinja2.Template:
    """``source`` compiled in a fresh bounded environment; raises :class:`PromptError`."""
    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"the model card's chat template is invalid: {exc}") from None

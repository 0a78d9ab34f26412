"""Layers by name: the built-in ones, and any a user registers (then names in `ContextConfig.layers`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from contextkeep._compaction._drop import DropLayer
from contextkeep._compaction._layer import Layer
from contextkeep._compaction._mask import MaskLayer
from contextkeep._compaction._names import LayerName
from contextkeep._compaction._reactive import ReactiveLayer
from contextkeep._compaction._summary import SummaryLayer
from contextkeep._errors import ConfigError

__all__ = ["LayerFactory", "layer_named", "register_layer", "resolve_layers"]

LayerFactory = Callable[[], Layer]
"""Makes a layer (a class with no required arguments will do); called once, when first used."""

_RESERVED = frozenset({str(LayerName.PIPELINE), "none"})
"""Names events use for no single layer."""

_layers: dict[str, Layer] = {
    LayerName.MASK: MaskLayer(),
    LayerName.DROP: DropLayer(),
    LayerName.SUMMARY: SummaryLayer(),
    LayerName.REACTIVE: ReactiveLayer(),
}
_factories: dict[str, LayerFactory] = {}
"""Registered layers not made yet."""


def register_layer(name: str, layer: Layer | LayerFactory, *, replace: bool = False) -> None:
    """Make `layer` (an instance, or a factory of one) available to `ContextConfig.layers` as `name`.

    The layer's own `name` must be `name` (it is what records and events show). Raises
    `ConfigError` for a malformed, reserved or (without `replace`) already registered name.
    """
    if not name or name != name.strip() or "," in name or name in _RESERVED:
        raise ConfigError("register_layer", f"{name!r} cannot name a layer")
    if (name in _layers or name in _factories) and not replace:
        raise ConfigError("register_layer", f"a layer named {name!r} is registered already")
    _layers.pop(name, None)
    _factories.pop(name, None)
    if isinstance(layer, type) or not isinstance(layer, Layer):  # a class (or other factory): made when used
        _factories[name] = layer
    else:
        _layers[name] = _check(name, layer)


def layer_named(name: str, key: str = "layers") -> Layer:
    """The layer registered as `name`; `ConfigError` naming `key` if there is none."""
    layer = _layers.get(name)
    if layer is not None:
        return layer
    factory = _factories.get(name)
    if factory is None:
        known = ", ".join([*_layers, *_factories])
        raise ConfigError(key, f"unknown layer {name!r} (registered: {known}; see register_layer)")
    made = factory()
    if not isinstance(made, Layer):
        raise TypeError(f"the factory of layer {name!r} made {made!r}, which is not a Layer")
    _layers[name] = _check(name, made)
    del _factories[name]
    return made


def resolve_layers(names: Sequence[str]) -> tuple[Layer, ...]:
    """The proactive layers `names` (a `ContextConfig.layers`) name, in order.

    Raises `ConfigError` naming `layers.<i>` for an unknown name, and for `L4`, which runs
    only after an overflow or when the view still exceeds the budget.
    """
    out = []
    for i, name in enumerate(names):
        if name == LayerName.REACTIVE:
            raise ConfigError(
                f"layers.{i}", "L4 is reactive: it runs after an overflow, not as a configured layer"
            )
        out.append(layer_named(name, f"layers.{i}"))
    return tuple(out)


def _check(name: str, layer: Layer) -> Layer:
    if layer.name != name:
        raise ConfigError("register_layer", f"a layer registered as {name!r} calls itself {layer.name!r}")
    return layer

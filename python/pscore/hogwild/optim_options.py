"""The optimizers a SharedParameters steps, with torch.optim's option names and defaults:
"sgd" (torch.optim.SGD), "adagrad" (Adagrad), "adam" (Adam) and "adamw" (AdamW: Adam with
decoupled weight decay). Which optimizer state the tables carry follows from the options
(SGD's momentum buffer when momentum != 0, Adam's maximum when amsgrad)."""

from __future__ import annotations

from typing import Any

from .. import _hogwild

__all__ = ["check_tables_serve", "kernel_options", "resolve", "table_state"]


def _fields(options: Any, *skip: str) -> dict[str, Any]:
    """The C++ option struct's fields and defaults (torch.optim's), without `skip`."""
    names = [n for n in dir(options) if not n.startswith("_") and not callable(getattr(options, n))]
    return {n: getattr(options, n) for n in names if n not in skip}


# Each family's options, read from the kernels' option structs; initial_accumulator_value is
# applied when the tables are made, and Adam's betas pair its beta1 and beta2.
_ADAM = _hogwild.AdamOptions()
DEFAULTS: dict[str, dict[str, Any]] = {
    "sgd": _fields(_hogwild.SgdOptions()),
    "adagrad": {**_fields(_hogwild.AdagradOptions(), "step"), "initial_accumulator_value": 0.0},
    "adam": {**_fields(_ADAM, "step", "beta1", "beta2"), "betas": (_ADAM.beta1, _ADAM.beta2)},
}
DEFAULTS["adamw"] = {**DEFAULTS["adam"], "weight_decay": 1e-2, "decoupled_weight_decay": True}

# The tables' optimizer state (SharedTable.create's optimizer=) each need can be served by.
_SERVED_BY = {
    None: {None, "momentum"},
    "momentum": {"momentum"},
    "adagrad": {"adagrad"},
    "adam": {"adam", "amsgrad"},
    "amsgrad": {"amsgrad"},
}


def resolve(family: str, given: dict) -> dict:
    """The family's defaults updated with `given`; TypeError names an option it does not take."""
    if family not in DEFAULTS:
        raise ValueError(f"optimizer {family!r} is not one of {', '.join(DEFAULTS)}")
    unknown = sorted(set(given) - set(DEFAULTS[family]))
    if unknown:
        raise TypeError(
            f"optimizer {family!r} takes no option {', '.join(map(repr, unknown))}; its "
            f"options are {', '.join(DEFAULTS[family])}"
        )
    options = {**DEFAULTS[family], **given}
    if family in {"adam", "adamw"}:
        options["betas"] = tuple(float(b) for b in options["betas"])
    return options


def table_state(family: str, options: dict) -> str | None:
    """The optimizer state (SharedTable.create's optimizer=) these options need."""
    if family == "sgd":
        return "momentum" if options["momentum"] != 0 else None
    if family == "adagrad":
        return "adagrad"
    return "amsgrad" if options["amsgrad"] else "adam"


_KERNEL_OPTIONS = {
    "sgd": _hogwild.SgdOptions,
    "adagrad": _hogwild.AdagradOptions,
    "adam": _hogwild.AdamOptions,
    "adamw": _hogwild.AdamOptions,
}


def check_tables_serve(family: str, created: dict, options: dict) -> None:
    """ValueError when `options` need optimizer state that tables made for `created` lack
    (momentum != 0 on tables made without it, amsgrad on tables made without it), or change
    initial_accumulator_value, which is applied when the tables are made."""
    need, have = table_state(family, options), table_state(family, created)
    if have not in _SERVED_BY[need]:
        raise ValueError(
            f"these options need tables with optimizer state {need!r} (SGD's momentum buffer "
            f"when momentum != 0, Adam's maximum with amsgrad), but the shared tables hold "
            f"{have or 'none'!r}; pass momentum / amsgrad to SharedParameters(...)"
        )
    if options.get("initial_accumulator_value") != created.get("initial_accumulator_value"):
        raise ValueError(
            "initial_accumulator_value is applied when the tables are made; pass it to "
            "SharedParameters(...)"
        )


def kernel_options(family: str, options: dict) -> Any:
    """The binding's options struct, checked: ValueError names a bad option and its value."""
    kw = {k: v for k, v in options.items() if k not in ("betas", "initial_accumulator_value")}
    if "betas" in options:
        kw["beta1"], kw["beta2"] = options["betas"]
    if not options.get("initial_accumulator_value", 0.0) >= 0:
        raise ValueError(
            f"Adagrad: initial_accumulator_value = {options['initial_accumulator_value']} "
            "must be >= 0"
        )
    k = _KERNEL_OPTIONS[family](**kw)
    k.check()
    return k

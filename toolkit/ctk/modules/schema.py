"""Declared schemas of module kinds: their inputs (type, default, doc) and outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Sentinel for "no default": the input is required.
REQUIRED = object()


@dataclass(frozen=True)
class Input:
    """One module input. `type` is a Terraform-like type string: string, number, bool,
    list(...), map(...), object({...}), any. A list(...) input collects `use` outputs."""

    name: str
    type: str = "any"
    default: Any = None
    doc: str = ""
    required: bool = False

    @property
    def is_list(self) -> bool:
        return self.type.startswith("list") or self.type.startswith("set")


@dataclass(frozen=True)
class Output:
    name: str
    doc: str = ""


@dataclass(frozen=True)
class ModuleKind:
    """A module source ctk knows. `role` says what it becomes in the Deployment model:
    nodeset, nodeset-tpu, partition, controller, login, image, shared-fs, startup-script,
    target (where the cluster is deployed: ctk/target/ssh), gcp-target (ctk/target/gcp),
    local-target (the lab's rehearsal settings: ctk/target/local),
    or "" for a known module ctk keeps but does not deploy (network, filestore, ...)."""

    source: str
    role: str
    inputs: tuple[Input, ...] = ()
    outputs: tuple[Output, ...] = ()
    doc: str = ""
    kind: str = "terraform"  # "terraform" or "packer", as in Cluster Toolkit
    # Inputs this kind does not list are accepted without a check (for modules whose full
    # input list ctk does not carry).
    open_inputs: bool = False
    # Input that Cluster Toolkit fills with the module's id when the blueprint leaves it unset
    # (its metadata's `ghpc.inject_module_id`), e.g. the nodeset `name`.
    inject_module_id: str = ""
    _by_name: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        self._by_name.update({i.name: i for i in self.inputs})

    def input(self, name: str) -> Input | None:
        return self._by_name.get(name)

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

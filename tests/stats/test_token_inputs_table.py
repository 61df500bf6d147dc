"""The token-input table is the one list of observe_loss's token tensors: signature, checks, op and kernel follow it."""

from __future__ import annotations

import inspect

import pytest
import torch

from grpo_monitor import GRPOMonitor
from grpo_monitor.stats.tokens import TOKEN_INPUTS, backends, native_build, token_inputs, validate_token_inputs
from grpo_monitor.stats.tokens.arguments import TENSOR_NAMES


def test_observe_loss_keywords_are_the_table_plus_loss_and_rows():
    """GRPOMonitor.observe_loss spells out its keywords; they are the table's names, then loss and rows, then the
    MoE routing ids (integer ``(B, T, L, k)`` tensors with a pass of their own, :mod:`grpo_monitor.stats.routing`)."""
    params = [p for p in inspect.signature(GRPOMonitor.observe_loss).parameters if p != "self"]
    assert params == [i.name for i in TOKEN_INPUTS] + ["loss", "rows", "routed_experts", "sampler_routed_experts"]


def test_the_op_schema_and_the_c_header_list_the_tensors_in_table_order():
    """The custom op takes the mask then every value tensor in table order; the C header's X-macro names each."""
    schema = backends.OP_SCHEMA
    positions = [schema.index(f"Tensor? {name},") for name in TENSOR_NAMES]
    assert positions == sorted(positions) and schema.startswith("(Tensor mask, ")
    header = native_build.generated_header()
    macro = next(line for line in header.splitlines() if line.startswith("#define TOKEN_INPUTS(X)"))
    assert macro.split()[2:] == [f"X({i.c_name})" for i in TOKEN_INPUTS if i.kind != "mask"]


@pytest.mark.parametrize("spec", [i for i in TOKEN_INPUTS if i.kind != "mask"], ids=lambda i: i.name)
def test_the_boundary_takes_what_the_row_says(spec):
    """Each tensor is taken (B, T) and, only where the row says per_row, (B,); a bool tensor is refused."""
    mask = torch.ones(2, 3)
    validate_token_inputs(mask, **{spec.name: torch.zeros(2, 3)})
    if spec.per_row:
        validate_token_inputs(mask, **{spec.name: torch.zeros(2)})
    else:
        with pytest.raises(ValueError, match=f"{spec.name} has shape"):
            validate_token_inputs(mask, **{spec.name: torch.zeros(2)})
    with pytest.raises(TypeError, match=f"{spec.name} must hold real numbers"):
        validate_token_inputs(mask, **{spec.name: torch.zeros(2, 3, dtype=torch.bool)})
    assert token_inputs(mask, **{spec.name: torch.zeros(2, 3)}).get(spec.name) is not None


def test_an_unknown_tensor_is_named():
    """A name outside the table is refused with the table's names."""
    with pytest.raises(TypeError, match="unexpected token tensor 'logits'"):
        validate_token_inputs(torch.ones(2, 3), logits=torch.zeros(2, 3))


def test_the_triton_kernel_takes_every_input_by_its_kernel_name():
    """The Triton kernel's value pointers are the table's ``c_name``s in table order, each with its presence flag
    (the name in capitals; the advantages' ``ADV`` says (B,) or (B, T)): a row without them fails here."""
    pytest.importorskip("triton")
    from grpo_monitor.stats.tokens import triton_kernel

    names = triton_kernel._token_pass.arg_names
    pointers = [i.c_name for i in TOKEN_INPUTS if i.kind != "mask"]
    first = names.index("m") + 1
    assert names[first:first + len(pointers)] == pointers
    flags = names.index("ADV")
    assert names[flags:flags + len(pointers)] == [p.upper() for p in pointers]

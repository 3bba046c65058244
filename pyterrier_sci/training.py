"""Training helpers every trainer of the toolkit shares.

:func:`guard_finite` makes a Hugging Face / sentence-transformers trainer stop with one
:class:`NonFiniteTrainingError` as soon as a training loss or a trainable parameter stops being
finite, instead of carrying on and saving a model full of NaN (transformers' default
``logging_nan_inf_filter`` even hides such losses from the log)::

    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=ds, loss=loss)
    guard_finite(trainer).train()

The loss is checked on every forward pass of the loss module (a forward hook, so the loss class and
the model card stay as they are); the parameters after every optimiser step.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Tuple

__all__ = ["NonFiniteTrainingError", "check_finite_loss", "first_non_finite_parameter", "guard_finite"]


class NonFiniteTrainingError(RuntimeError):
    """Training produced a NaN or infinite loss or parameter; nothing was saved."""


def check_finite_loss(value: Any, step: Optional[int] = None, what: str = "the training loss") -> None:
    """Raises :class:`NonFiniteTrainingError` when ``value`` (a tensor or a number) is not finite."""
    import torch
    if torch.is_tensor(value):
        finite = bool(torch.isfinite(value.detach()).all())
        shown = value.detach().float().flatten()[:4].tolist()
        shown = shown[0] if len(shown) == 1 else shown
    else:
        finite, shown = math.isfinite(float(value)), value
    if not finite:
        at = f" at step {step}" if step is not None else ""
        raise NonFiniteTrainingError(
            f"training stopped: {what} became {shown}{at}; nothing was saved. Lower the learning rate, check the "
            f"training data (empty texts, labels out of range) or the loss's inputs (padded lists)")


def first_non_finite_parameter(named_parameters: Iterable[Tuple[str, Any]]) -> Optional[str]:
    """The name of the first trainable parameter holding a NaN or an infinity, or ``None``."""
    import torch
    for name, p in named_parameters:
        if p.requires_grad and not bool(torch.isfinite(p.detach()).all()):
            return name
    return None


def guard_finite(trainer):
    """Adds the finiteness checks to a ``transformers.Trainer`` (sentence-transformers' trainers and
    cross-encoder trainers included) and returns it."""
    from transformers import TrainerCallback

    losses = trainer.loss if isinstance(getattr(trainer, "loss", None), dict) else {"": getattr(trainer, "loss", None)}

    def loss_hook(module, inputs, output):
        value = output.get("loss") if isinstance(output, dict) else output
        if value is not None:
            check_finite_loss(value, trainer.state.global_step + 1)

    for loss in losses.values():
        if loss is not None and hasattr(loss, "register_forward_hook"):
            loss.register_forward_hook(loss_hook)

    class FiniteParameters(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            name = first_non_finite_parameter((model or trainer.model).named_parameters())
            if name is not None:
                raise NonFiniteTrainingError(
                    f"training stopped: parameter {name!r} became NaN or infinite at step {state.global_step}; "
                    f"nothing was saved. Lower the learning rate or check the training data")

    trainer.add_callback(FiniteParameters())
    return trainer

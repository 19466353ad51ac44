"""zinc.ops.adam — DeepSpeed's FusedAdam and DeepSpeedCPUAdam (deepspeed.ops.adam, 0.19.8) as
scripts build them: `optimizer = FusedAdam(model.parameters(), lr=..., weight_decay=...)`, then
`deepspeed.initialize(model=..., optimizer=optimizer, ...)`.

In zinc they only hold the hyperparameters (torch.optim.Optimizer subclasses, so param_groups,
defaults, state_dict and isinstance checks behave as usual). zinc.initialize reads one into the
config's optimizer section, as it reads a client torch.optim.AdamW (_optimizer.py): type "AdamW"
when adam_w_mode (decoupled weight decay, the default of both), else "Adam" with adam_w_mode
false; lr, betas, eps, weight_decay and bias_correction of the first group, and each group's own
values. The update itself is zinc's fused Adam/AdamW (the same arithmetic either class stands
for), so step() outside zinc.initialize raises: there is no kernel here to run."""
import torch


class _AdamHyperparameters(torch.optim.Optimizer):
    """What FusedAdam and DeepSpeedCPUAdam have in common in zinc: param groups carrying lr,
    betas, eps, weight_decay, bias_correction (and amsgrad), and adam_w_mode (1 or True: AdamW)."""

    def __init__(self, params, defaults, adam_w_mode):
        super().__init__(params, defaults)
        self.adam_w_mode = adam_w_mode

    def step(self, closure=None):
        raise RuntimeError(
            f"zinc.ops.adam.{type(self).__name__}.step(): zinc's {type(self).__name__} holds the "
            "hyperparameters only; hand it to zinc.initialize(optimizer=...), whose engine.step() "
            "runs zinc's fused Adam/AdamW with them")


class FusedAdam(_AdamHyperparameters):
    """DeepSpeed's FusedAdam(params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999),
    eps=1e-8, adam_w_mode=True, weight_decay=0., amsgrad=False, set_grad_none=True).
    amsgrad=True raises RuntimeError at construction, as DeepSpeed's does."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 adam_w_mode=True, weight_decay=0., amsgrad=False, set_grad_none=True):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                        weight_decay=weight_decay)
        super().__init__(params, defaults, 1 if adam_w_mode else 0)
        self.set_grad_none = set_grad_none   # which way zero_grad clears: no effect on the math


class DeepSpeedCPUAdam(_AdamHyperparameters):
    """DeepSpeed's DeepSpeedCPUAdam(model_params, lr=1e-3, bias_correction=True,
    betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, adamw_mode=True,
    fp32_optimizer_states=True). DeepSpeed takes amsgrad=True and ignores it; zinc.initialize
    refuses it (and fp32_optimizer_states=False: zinc keeps the moments in fp32) by name, as it
    refuses anything it would compute differently."""

    def __init__(self, model_params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999),
                 eps=1e-8, weight_decay=0, amsgrad=False, adamw_mode=True,
                 fp32_optimizer_states=True):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, amsgrad=amsgrad)
        super().__init__(model_params, defaults, adamw_mode)
        self.fp32_optimizer_states = fp32_optimizer_states


__all__ = ["FusedAdam", "DeepSpeedCPUAdam"]

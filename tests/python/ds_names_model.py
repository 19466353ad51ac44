"""ds_names_model.py — the model and data of ds_script.py (test_ds_names.py): a small
mixture-of-experts network whose gate sends each sample to one of two experts, so which expert
runs (or whether one runs at all) depends on the data, the case DeepSpeed's ZeRO-3 leaf modules
are for. Plain torch: the script imports it from its own folder, as scripts import their own
modules (python -m zinc.as_deepspeed must put the script's folder first on sys.path)."""
import torch


class Expert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


class Experts(torch.nn.Module):
    """The gate picks one expert per sample (argmax); its softmax weight scales the output, so
    the gate trains too."""

    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(8, 2)
        self.experts = torch.nn.ModuleList([Expert(), Expert()])

    def forward(self, x):
        g = torch.softmax(self.gate(x), -1)
        choose = g.argmax(-1)
        out = torch.zeros_like(x)
        for i, e in enumerate(self.experts):
            idx = (choose == i).nonzero().flatten()
            if len(idx):
                out = out.index_add(0, idx, e(x[idx]))
        return out * g.max(-1).values[:, None]


class MoE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, 8)
        self.moe = Experts()
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.moe(torch.relu(self.embed(x))))


def dataset(rank, batches=3, micro=4):
    """This rank's samples: `batches` micro-batches of (x, y), the same for every run."""
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(batches * micro, 8, generator=g)
    y = (x[:, :1] * x[:, 1:2]).tanh()
    return torch.utils.data.TensorDataset(x, y)

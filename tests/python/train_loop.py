"""A small deterministic training run for test_store.py, run in its own
process so that it can really be killed:

    train_loop.py STORE STEPS full OUT        train from scratch, commit every
                                              step, write the parameters after
                                              each step to OUT (torch.save)
    train_loop.py STORE STEPS kill-after K    the same, then SIGKILL itself in
                                              the middle of step K+1
    train_loop.py STORE STEPS resume OUT      build a differently initialised
                                              model, resume from STORE, finish

The step draws from every generator a resume must restore: torch (data,
dropout), numpy and python's random (noise), and an Adam optimizer with a
StepLR schedule carries state across steps.
"""
import os
import random
import signal
import sys

import numpy as np
import torch

import ckpt


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Dropout(0.2), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def step(model, opt, sched):
    x = torch.randn(8, 16)
    noise = float(np.random.randn()) * random.random()
    y = x[:, :4] * 2 + noise
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


def params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main():
    store_dir, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    store = ckpt.Store(store_dir, keep=2)
    if mode == "resume":
        model, opt, sched = build(seed=1234)  # must not matter
        resumed = store.resume(model, opt, sched)
        first = resumed.step + 1
        print("resumed", resumed.path, resumed.step, resumed.verdict, ",".join(resumed.restored))
    else:
        random.seed(0)
        np.random.seed(0)
        model, opt, sched = build(seed=0)
        first = 1
    history = {}
    for s in range(first, steps + 1):
        step(model, opt, sched)
        if mode == "kill-after" and s == int(sys.argv[4]) + 1:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-step: nothing committed
        store.commit({"model": model, "optimizer": opt, "scheduler": sched}, s)
        history[s] = params(model)
    if mode != "kill-after":
        torch.save(history, sys.argv[4])


if __name__ == "__main__":
    main()

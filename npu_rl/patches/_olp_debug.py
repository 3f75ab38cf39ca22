def _dbg(mod):
    import torch, functools, hashlib, os
    orig = mod.HFRollout._generate_minibatch
    @functools.wraps(orig)
    def f(self, prompts):
        st = torch.get_rng_state()
        h = hashlib.md5(st.numpy().tobytes()).hexdigest()[:8]
        ih = hashlib.md5(prompts.batch["input_ids"].numpy().tobytes()).hexdigest()[:8]
        print(f"OLPDBG pid={os.getpid()} threads={torch.get_num_threads()} rng={h} inp={ih} probe={torch.rand(1).item()}", flush=True)
        torch.set_rng_state(st)
        out = orig(self, prompts)
        oh = hashlib.md5(out.batch["responses"].numpy().tobytes()).hexdigest()[:8]
        print(f"OLPDBG out={oh}", flush=True)
        return out
    mod.HFRollout._generate_minibatch = f
from npu_rl.patches.hooks import when_imported
when_imported("verl.workers.rollout.hf_rollout", _dbg)

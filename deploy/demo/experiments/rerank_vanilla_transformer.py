#!/usr/bin/python3
"""Issue 25 control experiment (deploy/demo/README.md, "Third round"): does a
plain PyTorch transformer of the demo encoder's size (4 layers, hidden 128,
4 heads, absolute positions, two token types) learn the demo rerank task's
query-passage comparison, and under which learning rate / LayerNorm
placement? Independent of dserve: nn.TransformerEncoder, the demo's
SentencePiece model through python3-sentencepiece, listwise softmax over each
query's group (or pointwise BCE), dev MRR@10 every 250 steps.

    /usr/bin/python3 deploy/demo/experiments/rerank_vanilla_transformer.py \
        --spm build/demo/tokenizer/spm.model --train TRAIN.jsonl --dev DEV.jsonl \
        [--lr 5e-4] [--prenorm 1] [--init 0.05] [--steps 1500] [--maxlen 48]

TRAIN/DEV: rerank JSONL (DESIGN.md section 4), e.g. build/demo/data/rerank_{train,dev}.jsonl;
--first-sentence 1 (the default, as in the README's runs) cuts every passage to its first sentence.
"""
import json, re, sys, math, random, time, argparse
import torch, torch.nn as nn, torch.nn.functional as F
import sentencepiece as spm
p = argparse.ArgumentParser()
p.add_argument('--spm', required=True)
p.add_argument('--train', required=True)
p.add_argument('--dev', required=True)
p.add_argument('--first-sentence', type=int, default=1, help='cut every passage to its first sentence (as the README runs)')
p.add_argument('--steps', type=int, default=1500)
p.add_argument('--lr', type=float, default=1e-3)
p.add_argument('--bs', type=int, default=16)
p.add_argument('--d', type=int, default=128)
p.add_argument('--layers', type=int, default=4)
p.add_argument('--heads', type=int, default=4)
p.add_argument('--prenorm', type=int, default=0)
p.add_argument('--loss', default='listwise')
p.add_argument('--pool', default='cls')
p.add_argument('--seg', type=int, default=1)
p.add_argument('--maxlen', type=int, default=48)
p.add_argument('--seed', type=int, default=0)
p.add_argument('--init', type=float, default=0)
a = p.parse_args()
torch.set_num_threads(1); torch.manual_seed(a.seed); random.seed(a.seed)
sp = spm.SentencePieceProcessor(model_file=a.spm)
CLS, SEP, PAD = sp.piece_to_id('[CLS]'), sp.piece_to_id('[SEP]'), 0
def groups(path):
    g = {}
    for l in open(path):
        r = json.loads(l); g.setdefault(r['query'], []).append((r['passage'], r['label']))
    out = []
    for q, ps in g.items():
        qi = sp.encode(q)
        items = []
        for t, lab in ps:
            if a.first_sentence: t = re.split(r'(?<=\.)\s', t)[0]
            pi = sp.encode(t)
            ids = ([CLS] + qi + [SEP] + pi + [SEP])[:a.maxlen]
            seg = ([0] * (len(qi) + 2) + [1] * (len(pi) + 1))[:a.maxlen]
            items.append((ids, seg, lab))
        out.append(items)
    return out
tr, dv = groups(a.train), groups(a.dev)
print('groups', len(tr), len(dv), flush=True)
V = sp.get_piece_size()
class M(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, a.d); s.pos = nn.Embedding(a.maxlen, a.d); s.seg = nn.Embedding(2, a.d)
        s.ln = nn.LayerNorm(a.d)
        L = nn.TransformerEncoderLayer(a.d, a.heads, 4 * a.d, dropout=0.0, activation='gelu', batch_first=True, norm_first=bool(a.prenorm))
        s.enc = nn.TransformerEncoder(L, a.layers)
        s.fl = nn.LayerNorm(a.d) if a.prenorm else nn.Identity()
        s.head = nn.Sequential(nn.Linear(a.d, a.d), nn.GELU(), nn.Linear(a.d, 1))
    def forward(s, ids, seg, mask):
        pos = torch.arange(ids.shape[1])[None]
        x = s.emb(ids) + s.pos(pos) + (s.seg(seg) if a.seg else 0)
        x = s.fl(s.enc(s.ln(x), src_key_padding_mask=~mask))
        if a.pool == 'cls': h = x[:, 0]
        else: h = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return s.head(h).squeeze(-1)
def batch(gs):
    items = [it for g in gs for it in g]
    L = max(len(i[0]) for i in items)
    ids = torch.tensor([i[0] + [PAD] * (L - len(i[0])) for i in items])
    seg = torch.tensor([i[1] + [0] * (L - len(i[1])) for i in items])
    mask = ids != PAD
    lab = torch.tensor([float(i[2]) for i in items])
    return ids, seg, mask, lab
m = M()
if a.init:
    for mod in m.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)): nn.init.normal_(mod.weight, 0, a.init)
        if isinstance(mod, nn.Linear) and mod.bias is not None: nn.init.zeros_(mod.bias)
    for l in m.enc.layers: nn.init.normal_(l.self_attn.in_proj_weight, 0, a.init); nn.init.zeros_(l.self_attn.in_proj_bias)
opt = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / 100) * max(0.0, 1 - s / a.steps))
def mrr():
    m.eval(); tot = 0
    with torch.no_grad():
        for g in dv:
            ids, seg, mask, lab = batch([g]); sc = m(ids, seg, mask)
            order = sc.argsort(descending=True).tolist()
            for r, i in enumerate(order):
                if lab[i] > 0: tot += 1 / (r + 1); break
    m.train(); return tot / len(dv)
t0 = time.time(); run = 0
for step in range(1, a.steps + 1):
    gs = random.sample(tr, a.bs)
    gs = [g for g in gs if len(g) == 6] or gs
    ids, seg, mask, lab = batch(gs)
    sc = m(ids, seg, mask)
    if a.loss == 'listwise':
        loss = -(F.log_softmax(sc.view(len(gs), -1), -1) * lab.view(len(gs), -1)).sum(-1).mean()
    else:
        loss = F.binary_cross_entropy_with_logits(sc, lab)
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); sched.step()
    run = 0.98 * run + 0.02 * loss.item()
    if step % 250 == 0:
        print(f'step {step} loss {run:.3f} dev_mrr {mrr():.3f} {time.time()-t0:.0f}s', flush=True)

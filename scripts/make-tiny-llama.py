"""Build the tiny randomly-initialised Llama that the real-engine server serves (no download)."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=32000, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=4, max_position_embeddings=8192, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2,
)
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {out}")

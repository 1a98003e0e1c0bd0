"""Published model configs the memory benches build (the sizes of each model card's config.json), shared by
bench/memory_compare.py and bench/gpu_memory.py: name -> (transformers config class, model class, dtype, sizes)."""

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False)

MODELS = {
    "Llama-3-8B": ("LlamaConfig", "LlamaForCausalLM", "bfloat16", LLAMA3_8B),
    "Mistral-7B-v0.1": ("MistralConfig", "MistralForCausalLM", "bfloat16", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=32768, sliding_window=4096, tie_word_embeddings=False)),
    "Gemma-2-2B": ("Gemma2Config", "Gemma2ForCausalLM", "bfloat16", dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, sliding_window=4096)),
    "GPT-2": ("GPT2Config", "GPT2LMHeadModel", "float32", dict(
        vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)),
    # allenai/OLMoE-1B-7B-0924
    "OLMoE-1B-7B": ("OlmoeConfig", "OlmoeForCausalLM", "bfloat16", dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=16, num_attention_heads=16,
        num_key_value_heads=16, num_experts=64, num_experts_per_tok=8, max_position_embeddings=4096,
        tie_word_embeddings=False)),
    # meta-llama/Llama-3.2-1B (tied embeddings)
    "Llama-3.2-1B": ("LlamaConfig", "LlamaForCausalLM", "bfloat16", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
        tie_word_embeddings=True)),
    # state-spaces/mamba-1.4b-hf
    "Mamba-1.4B": ("MambaConfig", "MambaForCausalLM", "bfloat16", dict(
        vocab_size=50280, hidden_size=2048, num_hidden_layers=48, state_size=16, expand=2, conv_kernel=4,
        tie_word_embeddings=True)),
    # Qwen/Qwen2.5-0.5B (tied embeddings, q/k/v biases)
    "Qwen2.5-0.5B": ("Qwen2Config", "Qwen2ForCausalLM", "bfloat16", dict(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True)),
    # openai/clip-vit-base-patch32, its vision tower (quick_gelu)
    "CLIP-B/32-vision": ("CLIPVisionConfig", "CLIPVisionModel", "bfloat16", dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, image_size=224,
        patch_size=32, hidden_act="quick_gelu")),
    # microsoft/resnet-50
    "ResNet-50": ("ResNetConfig", "ResNetForImageClassification", "bfloat16", dict(
        embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3], layer_type="bottleneck",
        num_labels=1000)),
    # google/vit-base-patch16-224
    "ViT-B/16": ("ViTConfig", "ViTForImageClassification", "bfloat16", dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, image_size=224,
        patch_size=16, num_labels=1000)),
}

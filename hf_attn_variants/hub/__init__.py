"""Model cards and publishing: what a checkpoint's card says, and the checks and upload that put a checkpoint on
the Hugging Face Hub."""

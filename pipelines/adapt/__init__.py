"""`knowledge adapt`: mining training pairs, fine-tuning the embedder, judging and calibrating the model folder."""

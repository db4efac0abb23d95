"""The files `knowledge adapt` writes into a model folder beside the model's own."""

# The training record of an adapted model.
ADAPT_RECORD = "adapt.json"
# The similarity thresholds fitted for the model folder (pipelines/config/model_calibration.py).
CALIBRATION_FILE = "calibration.json"
# Files of a model folder that describe it without changing its vectors: a new calibration or a model
# card's verdict must not make the ONNX backend export the model again.
DESCRIPTION_FILES = ("README.md", ADAPT_RECORD, CALIBRATION_FILE)

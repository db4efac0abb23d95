.PHONY: setup demo test
setup:
	scripts/setup.sh
demo:
	scripts/demo.sh
test:
	scripts/test.sh

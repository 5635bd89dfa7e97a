// trainer/describe.h: `./train describe CONFIG.yml [key=value ...]`: the model a config
// trains, as JSON on stdout, without allocating it: every config key's value, and the name
// and global shape of every trained tensor and every routing bias, under the names a
// checkpoint and a parity dump use. A peer program (tests/bench_peers.py on a GPU) builds
// the same model from it without a dump of its weights.
#ifndef MESHMOE_DESCRIBE_H
#define MESHMOE_DESCRIBE_H

int describe_main(int argc, char **argv);

#endif

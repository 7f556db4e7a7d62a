from ckpttools.cli.entry import console

console()

from ckpttools.cli.entry import main

main()

from ckpttools.cli.commands import main

main()

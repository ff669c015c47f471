from nsightlab.cli import main

main()

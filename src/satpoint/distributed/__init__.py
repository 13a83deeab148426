"""satpoint.distributed"""
